//! Escape tests for undo and checkpoints: planted refs, swapped symlinks, unsnapshotted files, the user's own edits.
