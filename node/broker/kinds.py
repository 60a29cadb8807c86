"""The broker's names in the engine's namespace (the link codec checks frames against them)."""
PUB_KIND = "pub"          # the message kind of a stored publication copy
PUB_PREFIX = "pub."       # its message ids: pub.<pub_id>.<node>.<broker hops>.<addressee>
