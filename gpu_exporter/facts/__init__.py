"""Facts every layer may read: the read cadences (``cadence``), NVIDIA's Xid
catalog as data (``xids``), outside text shown safely (``safetext``) and the
shape of a catalog entry (``catalog_types``)."""
