//! The Linux sandbox every command runs in: Landlock, seccomp, no_new_privs.
