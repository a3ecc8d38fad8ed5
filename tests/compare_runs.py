#!/usr/bin/env python3
# tests/compare_runs.py LOG_A MODEL_A LOG_B MODEL_B — how far two training runs lie apart, for the
# shell tests that hold one run to another to rounding (test_mpi.sh, test_zero.sh, test_cp.sh,
# tests/cuda/test_nccl_emu.sh). Prints one line "N dl dw": N, the train losses of each JSON log
# (one "type":"train" row a step); dl, the largest relative difference of those losses;
# dw = ||wa - wb|| / ||wa||, the weights of the two model files (the 1024-byte header, then
# float32). A missing file, or logs or models of different lengths, print "0 1 1 (why)", which
# no limit accepts. Exits 0 either way: the caller judges the numbers.
import array
import math
import re
import sys


def losses(path):
    text = open(path).read()
    return [float(m) for m in re.findall(r'"type":"train","step":\d+,"loss":([^,}]*)', text)]


def weights(path):
    a = array.array('f')
    a.frombytes(open(path, 'rb').read()[1024:])
    return a


def main(argv):
    if len(argv) != 5:
        print("0 1 1 (usage: compare_runs.py LOG_A MODEL_A LOG_B MODEL_B)")
        return 0
    try:
        la, lb = losses(argv[1]), losses(argv[3])
        wa, wb = weights(argv[2]), weights(argv[4])
    except OSError as e:
        print("0 1 1 (%s)" % e)
        return 0
    if len(la) != len(lb) or not la or len(wa) != len(wb) or not wa:
        print("0 1 1 (%d vs %d losses, %d vs %d weights)" % (len(la), len(lb), len(wa), len(wb)))
        return 0
    dl = max(abs(x - y) / abs(x) for x, y in zip(la, lb))
    dw = math.sqrt(sum((x - y) ** 2 for x, y in zip(wa, wb))) / math.sqrt(sum(x * x for x in wa))
    print("%d %.3g %.3g" % (len(la), dl, dw))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
