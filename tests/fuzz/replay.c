/* main() of tests/fuzz/replay-<target>: the target's corpus as a
 * regression test, built with the ordinary compiler (no libFuzzer).
 *
 *   replay-<target> [FILE|DIR...]
 *
 * Without arguments it replays tests/fuzz/corpus/<target>/ of the source
 * tree (<target> from its own name).  Each input is handed to the target
 * in a buffer of exactly its size, so the sanitizers of an ASan build see
 * any read past it.  A broken promise aborts (the test fails, naming the
 * input); an empty or missing corpus fails too: nothing was tested. */
#include "fuzz.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef FUZZ_CORPUS_DIR
#error "FUZZ_CORPUS_DIR: the source tree's tests/fuzz/corpus"
#endif

static int replay_file(const char *path)
{
	struct stat st;
	uint8_t *data;
	size_t got = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || fstat(fd, &st) != 0) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	data = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!data)
		abort();
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, data + got, (size_t)st.st_size - got);
		if (n <= 0) {
			fprintf(stderr, "replay: %s: short read\n", path);
			close(fd);
			free(data);
			return -1;
		}
		got += (size_t)n;
	}
	close(fd);
	fprintf(stderr, "replay: %s\n", path);
	LLVMFuzzerTestOneInput(data, got);
	free(data);
	return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static int not_hidden(const struct dirent *d)
{
	return d->d_name[0] != '.';
}

/* Every file of dir in name order; how many, or -1. */
static int replay_dir(const char *dir)
{
	struct dirent **names;
	int n = scandir(dir, &names, not_hidden, by_name), count = 0;

	if (n < 0) {
		fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
		return -1;
	}
	for (int i = 0; i < n; i++) {
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name);
		if (count >= 0 && replay_file(path) == 0)
			count++;
		else
			count = -1;
		free(names[i]);
	}
	free(names);
	return count;
}

int main(int argc, char **argv)
{
	char dir[PATH_MAX];
	const char *self = strrchr(argv[0], '/');
	int total = 0;

	self = self ? self + 1 : argv[0];
	if (strncmp(self, "replay-", 7) != 0) {
		fprintf(stderr, "replay: cannot tell the target from my name '%s'\n", self);
		return 1;
	}
	if (argc < 2) {
		snprintf(dir, sizeof(dir), "%s/%s", FUZZ_CORPUS_DIR, self + 7);
		total = replay_dir(dir);
	}
	for (int i = 1; i < argc && total >= 0; i++) {
		struct stat st;
		int n = stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode) ? replay_dir(argv[i])
								      : replay_file(argv[i]) == 0;
		total = n < 0 ? -1 : total + n;
	}
	if (total <= 0) {
		fprintf(stderr, "%s: %s\n", self, total < 0 ? "an input could not be read" : "no input to replay");
		return 1;
	}
	printf("%s: %d inputs replayed, every promise kept\n", self, total);
	return 0;
}
