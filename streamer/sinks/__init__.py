"""Where processed frames can go besides the sending peer: files, a virtual camera, WHEP viewers."""
