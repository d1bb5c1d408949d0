/*
 * tests/unit/test_fuzz_replay_scan.c — replays the fuzz_scan corpus (tests/fuzz/corpus/scan/,
 * path in argv[1]) through the fuzzer's check function (tests/fuzz/fuzz_scan.c).
 */
#include "replay.h"

const char *fuzz_scan_check(const uint8_t *data, size_t size);

int main(int argc, char **argv)
{
	return fuzz_replay_main(argc, argv, fuzz_scan_check, 12);
}
