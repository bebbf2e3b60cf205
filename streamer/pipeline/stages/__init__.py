"""Pipeline stages, one module each: faces (detect + track), fusion, edits, watermark."""
