#!/usr/bin/env bash
# tests/test_cp_ranks.sh — tests/test_cp.sh's checks at 3 and 4 ranks alone (a ring turning the
# wrong way passes at 2 ranks, whose two neighbours are one rank): what the ring's mutants run.
# make test runs them inside tests/test_cp.sh.
SEEDGPT_CP_ONLY=ranks3-4 exec "$(dirname "$0")/test_cp.sh"
