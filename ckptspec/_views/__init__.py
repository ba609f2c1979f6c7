"""The layer every reader is seen through: `base` (the view types), `open` (the one entry point),
and one module per family of formats building their views."""
