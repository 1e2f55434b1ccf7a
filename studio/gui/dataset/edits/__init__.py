"""Edits of captions: undo steps, saving in the background, the bulk operations and captioning by a model."""
