"""What runs a capture: the session (:mod:`.session`), made of the sources its plan picks
(:mod:`.plan`: each source's row says what it needs of the backend, and the backend is
chosen from those needs before any source is made)."""
