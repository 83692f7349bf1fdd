"""What one poll is: each stage (``stage``), with what the stages share
(``runtime``), reads into the poll's snapshot (``snapshot``): typed readings
(``readings``) and series named in the metric catalog (``catalog``)."""
