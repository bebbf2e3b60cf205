"""The browser page (index.html + plain ES modules, no build step); served by streamer.web.server."""
