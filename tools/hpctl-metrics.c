/* hpctl metrics: the entries of `hpctl stats` in Prometheus' text format.
 * The library formats them (hp_proc_prometheus, lib/metrics.c) and reads
 * them (hp_proc_list / hp_proc_get): this file only delivers the text.
 *
 *   metrics [PID...]                    on standard output
 *   metrics --textfile FILE [PID...]    into FILE, replaced atomically (a
 *                                       temporary file in its directory,
 *                                       fsync, rename): node_exporter's
 *                                       textfile collector never reads half
 *   metrics --listen [ADDR:]PORT        served over HTTP (GET /metrics),
 *                                       on 127.0.0.1 unless ADDR is given,
 *                                       until SIGINT or SIGTERM; read anew
 *                                       for every request
 *
 * The server is one thread answering one request at a time: a scrape is a
 * few kilobytes read from the control directory.  A client gets 5 seconds
 * to send its request and to take the answer, so a stalled one cannot
 * hold the others up for longer.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "hpctl.h"
#include "private.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define REQUEST_MAX 8192
#define CLIENT_TIMEOUT_S 5

/* The text for c's processes into *text (free it): an exit status. */
static int gather(struct hpctl *c, char **text, size_t *len)
{
	struct hp_proc_list l = { 0 };
	int rc = stats_collect(c, &l);

	*text = NULL;
	if (rc == EXIT_OK) {
		*text = hp_proc_prometheus(l.procs, l.count, len);
		if (!*text) {
			warnx("cannot format the metrics: %s", strerror(errno));
			rc = EXIT_RUNTIME;
		}
	}
	hp_proc_list_free(&l);
	return rc;
}

/* ---- --textfile ----------------------------------------------------------------- */

/* FILE's directory and name (a usage error when it names no file). */
static const char *split_textfile(const char *path, char *dir, size_t dl)
{
	const char *slash = strrchr(path, '/'), *name = slash ? slash + 1 : path;

	if (!*name || !strcmp(name, ".") || !strcmp(name, ".."))
		die_usage("metrics --textfile: '%s' names no file", path);
	if (!slash)
		snprintf(dir, dl, ".");
	else if (slash == path)
		snprintf(dir, dl, "/");
	else if (snprintf(dir, dl, "%.*s", (int)(slash - path), path) >= (int)dl)
		die_usage("metrics --textfile: '%s' is too long", path);
	return name;
}

static int write_textfile(const char *path, const char *text, size_t len)
{
	char dir[PATH_MAX];
	const char *name = split_textfile(path, dir, sizeof(dir));
	int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (dirfd < 0) {
		warnx("metrics --textfile: cannot open directory %s: %s", dir, strerror(errno));
		return EXIT_RUNTIME;
	}
	/* durable: the collector may read it after a crash of this machine */
	if (securedir_write_atomic(dirfd, name, text, len, 0644, true) != 0) {
		warnx("metrics --textfile: cannot write %s: %s (left as it was)", path,
		      strerror(errno));
		close(dirfd);
		return EXIT_RUNTIME;
	}
	close(dirfd);
	return EXIT_OK;
}

/* ---- --listen ------------------------------------------------------------------- */

/* "PORT", "ADDR:PORT" or "[ADDR]:PORT" (IPv6) into host and port. */
static void parse_listen(const char *spec, char *host, size_t hl, char *port, size_t pl)
{
	const char *colon = strrchr(spec, ':'), *p;
	size_t n;

	if (!colon) {
		snprintf(host, hl, "127.0.0.1");
		p = spec;
	} else {
		const char *h = spec;
		n = (size_t)(colon - spec);
		if (n >= 2 && spec[0] == '[' && spec[n - 1] == ']') {
			h++;
			n -= 2;
		} else if (memchr(spec, ':', n)) {
			die_usage("invalid --listen '%s' (PORT, ADDR:PORT or [IPV6]:PORT)", spec);
		}
		if (n == 0 || n >= hl)
			die_usage("invalid --listen '%s' (PORT, ADDR:PORT or [IPV6]:PORT)", spec);
		snprintf(host, hl, "%.*s", (int)n, h);
		p = colon + 1;
	}
	char *end;
	errno = 0;
	long v = strtol(p, &end, 10);
	if (errno || end == p || *end || p[0] < '0' || p[0] > '9' || v < 0 || v > 65535)
		die_usage("invalid port '%s' in --listen '%s' (0 to 65535; 0: any free port)",
			  p, spec);
	snprintf(port, pl, "%ld", v);
}

/* A listening socket on host:port, or exit saying why not. */
static int listen_on(const char *spec, char *shown, size_t sl)
{
	char host[256], port[16], h[NI_MAXHOST], s[NI_MAXSERV];
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *res = NULL;
	struct sockaddr_storage ss;
	socklen_t sslen = sizeof(ss);
	int fd, one = 1, err;

	parse_listen(spec, host, sizeof(host), port, sizeof(port));
	err = getaddrinfo(host, port, &hints, &res);
	if (err)
		die_usage("invalid address '%s' in --listen '%s': %s", host, spec,
			  gai_strerror(err));
	fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, res->ai_protocol);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
	    bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 16) != 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &sslen) != 0) {
		warnx("metrics: cannot listen on %s port %s: %s", host, port, strerror(errno));
		exit(EXIT_RUNTIME);
	}
	freeaddrinfo(res);
	if (getnameinfo((struct sockaddr *)&ss, sslen, h, sizeof(h), s, sizeof(s),
			NI_NUMERICHOST | NI_NUMERICSERV) != 0)
		snprintf(h, sizeof(h), "%s", host), snprintf(s, sizeof(s), "%s", port);
	snprintf(shown, sl, strchr(h, ':') ? "[%s]:%s" : "%s:%s", h, s);
	return fd;
}

static volatile sig_atomic_t serve_stop;

static void on_stop(int sig)
{
	(void)sig;
	serve_stop = 1;
}

static void send_all(int fd, const char *data, size_t len)
{
	while (len) {
		ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR && !serve_stop)
			continue;
		if (n <= 0)
			return; /* the client went away or stalled: its loss */
		data += n;
		len -= (size_t)n;
	}
}

static void respond(int fd, const char *status, const char *type, const char *extra,
		    const char *body, size_t len, bool head)
{
	char hdr[512];
	int n = snprintf(hdr, sizeof(hdr), "HTTP/1.0 %s\r\nContent-Type: %s\r\n"
			 "Content-Length: %zu\r\n%sConnection: close\r\n\r\n",
			 status, type, len, extra ? extra : "");

	send_all(fd, hdr, (size_t)n);
	if (!head)
		send_all(fd, body, len);
}

/* Read the request head (up to the blank line); false if none came. */
static bool read_request(int fd, char *buf, size_t cap)
{
	size_t got = 0;

	while (got < cap - 1) {
		ssize_t n = recv(fd, buf + got, cap - 1 - got, 0);
		if (n < 0 && errno == EINTR && !serve_stop)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
		buf[got] = '\0';
		if (strstr(buf, "\r\n\r\n") || strstr(buf, "\n\n"))
			return true;
	}
	buf[got] = '\0';
	return got > 0 && strchr(buf, '\n'); /* at least a request line */
}

static const char index_page[] =
	"<html><head><title>hpalloc metrics</title></head><body>"
	"<h1>hpalloc</h1><p><a href=\"/metrics\">Metrics</a></p></body></html>\n";

static void answer(struct hpctl *c, int fd)
{
	char req[REQUEST_MAX], method[16], path[1024];
	struct timeval tv = { .tv_sec = CLIENT_TIMEOUT_S };
	char *text;
	size_t len;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (!read_request(fd, req, sizeof(req)) ||
	    sscanf(req, "%15s %1023s HTTP/", method, path) != 2) {
		respond(fd, "400 Bad Request", "text/plain", NULL, "bad request\n", 12, false);
		return;
	}
	path[strcspn(path, "?#")] = '\0';
	bool head = !strcmp(method, "HEAD");
	if (!head && strcmp(method, "GET") != 0) {
		respond(fd, "405 Method Not Allowed", "text/plain", "Allow: GET, HEAD\r\n",
			"GET or HEAD only\n", 17, false);
	} else if (!strcmp(path, "/metrics")) {
		if (gather(c, &text, &len) == EXIT_OK) {
			respond(fd, "200 OK", CONTENT_TYPE, NULL, text, len, head);
			free(text);
		} else {
			respond(fd, "500 Internal Server Error", "text/plain", NULL,
				"cannot read the stats (see hpctl's standard error)\n", 51, head);
		}
	} else if (!strcmp(path, "/")) {
		respond(fd, "200 OK", "text/html", NULL, index_page, sizeof(index_page) - 1, head);
	} else {
		respond(fd, "404 Not Found", "text/plain", NULL, "not found: try /metrics\n",
			24, head);
	}
}

static int serve(struct hpctl *c)
{
	struct sigaction sa = { .sa_handler = on_stop }; /* no SA_RESTART: accept returns */
	char shown[NI_MAXHOST + NI_MAXSERV + 4];
	int lfd;

	lfd = listen_on(c->metrics_listen, shown, sizeof(shown));
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	fprintf(stderr, "hpctl: serving metrics on http://%s/metrics\n", shown);
	fflush(stderr);
	while (!serve_stop) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EINTR && errno != ECONNABORTED && errno != EMFILE &&
			    errno != ENFILE && errno != ENOBUFS && errno != ENOMEM) {
				warnx("metrics: accept: %s", strerror(errno));
				close(lfd);
				return EXIT_RUNTIME;
			}
			if (errno != EINTR && errno != ECONNABORTED)
				sleep(1); /* out of descriptors or memory: let it pass */
			continue;
		}
		answer(c, fd);
		close(fd);
	}
	close(lfd);
	return EXIT_OK;
}

/* ---- the command -------------------------------------------------------------------- */

int cmd_metrics(struct hpctl *c)
{
	char dir[PATH_MAX], *text;
	size_t len;
	int rc;

	if (c->metrics_textfile && c->metrics_listen)
		die_usage("metrics: --textfile or --listen, not both");
	if (c->metrics_listen && c->argc)
		die_usage("metrics --listen serves every process: no PID arguments");
	if (c->metrics_textfile)
		split_textfile(c->metrics_textfile, dir, sizeof(dir)); /* usage first */
	rc = gather(c, &text, &len); /* a refused control directory: before serving */
	if (rc != EXIT_OK)
		return rc; /* nothing written: a PID that does not publish */
	if (c->metrics_listen) {
		free(text);
		return serve(c);
	}
	if (c->metrics_textfile)
		rc = write_textfile(c->metrics_textfile, text, len);
	else
		fwrite(text, 1, len, stdout);
	free(text);
	return rc;
}
