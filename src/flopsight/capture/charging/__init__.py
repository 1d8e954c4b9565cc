"""Where a cost goes and what it adds up to: the one attribution rule (:mod:`.attribution`),
the one cost evaluation (:mod:`.costs`), module calls' records (:mod:`.calls`), the part
counting makes (:mod:`.counts`), and the warnings it raises (:mod:`.notices`)."""
