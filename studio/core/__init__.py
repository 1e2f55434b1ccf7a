"""Qt-free, torch-free model of the studio: config, presets, datasets, hardware, runs."""
