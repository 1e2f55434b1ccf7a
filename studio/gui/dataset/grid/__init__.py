"""The grid of images: its model, the filter's search, the thumbnails, the toolbar above it."""
