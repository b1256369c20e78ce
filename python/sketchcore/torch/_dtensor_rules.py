"""DTensor rules of sketchcore's operators (placeholder)."""
