//! The local backend: the in-process engine behind the `ChatBackend` trait.
