"""doctor: can zotsink be trusted on this filesystem, and what does auto choose there."""
