//! Configuration: flags > env > project `.baton/config.toml` > user config > defaults.
