//! The Mixture-of-LoRA loop: profiles, the route hop, the timeline of tasks and each expert's view, summaries.
