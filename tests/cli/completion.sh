echo "not written yet" >&2; exit 77
