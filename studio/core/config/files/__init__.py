"""The config as files: the TOML file, merging, presets and the paths a config names."""
