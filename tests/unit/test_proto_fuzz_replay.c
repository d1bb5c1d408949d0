/*
 * tests/unit/test_proto_fuzz_replay.c — replays the fuzz_proto corpus (tests/fuzz/corpus/proto/,
 * path in argv[1]) through the fuzzer's check function (tests/fuzz/fuzz_proto.c): the decoder
 * and server invariants.
 */
#include "replay.h"

const char *fuzz_proto_check(const uint8_t *data, size_t size);
void fuzz_proto_done(void);

int main(int argc, char **argv)
{
	int rc = fuzz_replay_main(argc, argv, fuzz_proto_check, 30);

	fuzz_proto_done();
	return rc;
}
