/* hpctl metrics: the entries of `hpctl stats` in Prometheus' text format.
 * The library formats them (hp_proc_prometheus, lib/control/metrics.c) and reads
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
 * The server is one thread with a poll() loop over every connection, at
 * most CONN_MAX at once (more wait in the kernel's listen queue until one
 * ends).  Each connection has CLIENT_DEADLINE_MS, counted from its accept,
 * for the whole exchange: sending its request head (at most REQUEST_MAX
 * bytes: 413 beyond; 400 for one that is no HTTP request, 408 at the
 * deadline) and taking the answer; then it is closed whatever it is doing.
 * A slow or stalled client therefore holds one slot for at most that long,
 * and never the others: each scrape is answered as soon as its request is
 * in (a scrape is a few kilobytes read from the control directory, made in
 * the loop's thread).  SIGINT and SIGTERM are blocked except while the
 * loop waits in ppoll(), so a stop is never missed.
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
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define REQUEST_MAX 8192          /* a request head, bytes */
#define CLIENT_DEADLINE_MS 5000   /* a whole exchange, from accept to the answer taken */
#define CONN_MAX 64               /* connections served at once */
#define ACCEPT_PAUSE_MS 100       /* out of descriptors or memory: accept again after */
#define LISTEN_BACKLOG 128        /* waiting while CONN_MAX are served */

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
	fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
		    res->ai_protocol);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
	    bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, LISTEN_BACKLOG) != 0 ||
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

/* Every connection's state: the server answers many clients at once from
 * one thread, each under a total deadline. */
enum phase { READING, WRITING, DRAINING };

struct conn {
	int fd;                  /* -1: a free slot */
	enum phase phase;
	long long deadline_ms;   /* CLOCK_MONOTONIC: the whole exchange ends by then */
	size_t got;              /* request bytes in req */
	char req[REQUEST_MAX];
	char *out;               /* the answer (status line, headers, body) */
	size_t out_len, out_sent;
};

static volatile sig_atomic_t serve_stop;

static void on_stop(int sig)
{
	(void)sig;
	serve_stop = 1;
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void conn_close(struct conn *k, int *active)
{
	close(k->fd);
	free(k->out);
	k->fd = -1;
	k->out = NULL;
	(*active)--;
}

/* The answer into k->out, then the connection writes it. */
static void conn_respond(struct conn *k, const char *status, const char *type,
			 const char *extra, const char *body, size_t len, bool head)
{
	char hdr[512];
	int n = snprintf(hdr, sizeof(hdr), "HTTP/1.0 %s\r\nContent-Type: %s\r\n"
			 "Content-Length: %zu\r\n%sConnection: close\r\n\r\n",
			 status, type, len, extra ? extra : "");
	size_t total = (size_t)n + (head ? 0 : len);

	free(k->out);
	k->out = malloc(total);
	k->out_len = k->out ? total : 0;
	k->out_sent = 0;
	if (k->out) {
		memcpy(k->out, hdr, (size_t)n);
		if (!head)
			memcpy(k->out + n, body, len);
	}
	k->phase = WRITING; /* with no memory for it: nothing to write, closed */
}

static void conn_error(struct conn *k, const char *status, const char *body)
{
	conn_respond(k, status, "text/plain", NULL, body, strlen(body), false);
}

static const char index_page[] =
	"<html><head><title>hpalloc metrics</title></head><body>"
	"<h1>hpalloc</h1><p><a href=\"/metrics\">Metrics</a></p></body></html>\n";

/* "METHOD TARGET HTTP/x.y" (its line end cut): method and path (query
 * and fragment cut) in place; false if it is no such line. */
static bool parse_request_line(char *line, char **method, char **path)
{
	char *sp1 = strchr(line, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;

	if (!sp1 || sp1 == line || !sp2 || sp2 == sp1 + 1 || strncmp(sp2 + 1, "HTTP/", 5) != 0)
		return false;
	for (char *p = line; p < sp1; p++)
		if (*p < 'A' || *p > 'Z')
			return false;
	for (char *p = sp1 + 1; p < sp2; p++)
		if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f)
			return false;
	*sp1 = *sp2 = '\0';
	*method = line;
	*path = sp1 + 1;
	(*path)[strcspn(*path, "?#")] = '\0';
	return true;
}

/* The request head in k->req is whole (or the client ended it): answer. */
static void conn_answer(struct hpctl *c, struct conn *k)
{
	char *eol = memchr(k->req, '\n', k->got), *method, *path, *text;
	size_t len;

	if (!eol || memchr(k->req, '\0', k->got)) {
		conn_error(k, "400 Bad Request", "bad request\n");
		return;
	}
	*eol = '\0';
	if (eol > k->req && eol[-1] == '\r')
		eol[-1] = '\0';
	if (!parse_request_line(k->req, &method, &path)) {
		conn_error(k, "400 Bad Request", "bad request\n");
		return;
	}
	bool head = !strcmp(method, "HEAD");
	if (!head && strcmp(method, "GET") != 0) {
		conn_respond(k, "405 Method Not Allowed", "text/plain", "Allow: GET, HEAD\r\n",
			     "GET or HEAD only\n", 17, false);
	} else if (!strcmp(path, "/metrics")) {
		if (gather(c, &text, &len) == EXIT_OK) {
			conn_respond(k, "200 OK", CONTENT_TYPE, NULL, text, len, head);
			free(text);
		} else {
			conn_respond(k, "500 Internal Server Error", "text/plain", NULL,
				     "cannot read the stats (see hpctl's standard error)\n", 51, head);
		}
	} else if (!strcmp(path, "/")) {
		conn_respond(k, "200 OK", "text/html", NULL, index_page, sizeof(index_page) - 1, head);
	} else {
		conn_respond(k, "404 Not Found", "text/plain", NULL, "not found: try /metrics\n", 24,
			     head);
	}
}

static bool head_complete(const struct conn *k)
{
	return memmem(k->req, k->got, "\r\n\r\n", 4) || memmem(k->req, k->got, "\n\n", 2);
}

/* Readable while reading the request: more of it, or its end. */
static void conn_read(struct hpctl *c, struct conn *k, int *active)
{
	ssize_t n = recv(k->fd, k->req + k->got, sizeof(k->req) - k->got, 0);

	if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
		return;
	if (n < 0 || (n == 0 && k->got == 0)) {
		conn_close(k, active); /* gone before it asked anything */
		return;
	}
	k->got += (size_t)n;
	if (n == 0 || head_complete(k))
		conn_answer(c, k); /* an early end: what came is judged as it is */
	else if (k->got == sizeof(k->req))
		conn_error(k, "413 Content Too Large", "request head larger than 8192 bytes\n");
}

/* Writable: more of the answer; all of it sent, the connection drains
 * what the client still sends until it closes (so our close cannot reset
 * the answer away before it is read). */
static void conn_write(struct conn *k, int *active)
{
	while (k->out_sent < k->out_len) {
		ssize_t n = send(k->fd, k->out + k->out_sent, k->out_len - k->out_sent,
				 MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			conn_close(k, active);
			return;
		}
		k->out_sent += (size_t)n;
	}
	shutdown(k->fd, SHUT_WR);
	k->phase = DRAINING;
}

static void conn_drain(struct conn *k, int *active)
{
	char sink[4096];
	ssize_t n = recv(k->fd, sink, sizeof(sink), 0);

	if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK))
		conn_close(k, active);
}

/* Past the deadline: a client still sending its request is told so (best
 * effort: one send that does not wait), any other is closed. */
static void conn_expire(struct conn *k, int *active)
{
	static const char timeout[] = "HTTP/1.0 408 Request Timeout\r\nContent-Type: text/plain\r\n"
				      "Content-Length: 16\r\nConnection: close\r\n\r\n"
				      "request timeout\n";

	if (k->phase == READING)
		(void)send(k->fd, timeout, sizeof(timeout) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
	conn_close(k, active);
}

/* Accept what the listening socket has, while there are free slots;
 * false on an error that ends the server. */
static bool accept_some(int lfd, struct conn *conns, int *active, long long *pause_until)
{
	while (*active < CONN_MAX) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
			    errno == ECONNABORTED)
				return true;
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				*pause_until = now_ms() + ACCEPT_PAUSE_MS; /* let it pass */
				return true;
			}
			warnx("metrics: accept: %s", strerror(errno));
			return false;
		}
		struct conn *k = conns;
		while (k->fd >= 0)
			k++; /* a free slot: *active < CONN_MAX */
		k->fd = fd;
		k->phase = READING;
		k->got = 0;
		k->deadline_ms = now_ms() + CLIENT_DEADLINE_MS;
		(*active)++;
	}
	return true;
}

/* One round: wait for the listening socket (while a slot is free) and every
 * connection, at most until the nearest deadline; then serve what is ready
 * and close what expired.  false on an error that ends the server. */
static bool serve_round(struct hpctl *c, int lfd, struct conn *conns, int *active,
			long long *pause_until, const sigset_t *waitmask)
{
	struct pollfd pfd[CONN_MAX + 1];
	struct conn *who[CONN_MAX + 1];
	long long now = now_ms(), wake = now + 60 * 1000;
	int n = 0;

	if (*active < CONN_MAX && now >= *pause_until) {
		pfd[n] = (struct pollfd){ .fd = lfd, .events = POLLIN };
		who[n++] = NULL;
	} else if (*active < CONN_MAX && *pause_until < wake) {
		wake = *pause_until;
	}
	for (struct conn *k = conns; k < conns + CONN_MAX; k++) {
		if (k->fd < 0)
			continue;
		pfd[n] = (struct pollfd){ .fd = k->fd,
					  .events = k->phase == WRITING ? POLLOUT : POLLIN };
		who[n++] = k;
		if (k->deadline_ms < wake)
			wake = k->deadline_ms;
	}
	long long wait = wake > now ? wake - now : 0;
	struct timespec ts = { .tv_sec = wait / 1000, .tv_nsec = (wait % 1000) * 1000000 };
	if (ppoll(pfd, (nfds_t)n, &ts, waitmask) < 0)
		return errno == EINTR || errno == ENOMEM; /* a signal: serve_stop says */
	for (int i = 0; i < n; i++) {
		struct conn *k = who[i];
		if (!pfd[i].revents)
			continue;
		if (!k) {
			if (!accept_some(lfd, conns, active, pause_until))
				return false;
		} else if (k->phase == READING) {
			conn_read(c, k, active);
		} else if (k->phase == WRITING) {
			conn_write(k, active);
		} else {
			conn_drain(k, active);
		}
		/* an answer just made is sent at once (the socket is writable) */
		if (k && k->fd >= 0 && k->phase == WRITING && !k->out)
			conn_close(k, active);
		else if (k && k->fd >= 0 && k->phase == WRITING && k->out_sent == 0)
			conn_write(k, active);
	}
	now = now_ms();
	for (struct conn *k = conns; k < conns + CONN_MAX; k++)
		if (k->fd >= 0 && now >= k->deadline_ms)
			conn_expire(k, active);
	return true;
}

static int serve(struct hpctl *c)
{
	struct sigaction sa = { .sa_handler = on_stop };
	char shown[NI_MAXHOST + NI_MAXSERV + 4];
	sigset_t stops, waitmask;
	struct conn *conns = calloc(CONN_MAX, sizeof(*conns));
	long long pause_until = 0;
	int lfd, active = 0, rc = EXIT_OK;

	if (!conns) {
		warnx("metrics: out of memory");
		return EXIT_RUNTIME;
	}
	for (int i = 0; i < CONN_MAX; i++)
		conns[i].fd = -1;
	lfd = listen_on(c->metrics_listen, shown, sizeof(shown));
	/* SIGINT and SIGTERM are blocked but while ppoll waits: none is lost
	 * between a look at serve_stop and the wait */
	sigemptyset(&stops);
	sigaddset(&stops, SIGINT);
	sigaddset(&stops, SIGTERM);
	sigprocmask(SIG_BLOCK, &stops, &waitmask);
	sigdelset(&waitmask, SIGINT);
	sigdelset(&waitmask, SIGTERM);
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	fprintf(stderr, "hpctl: serving metrics on http://%s/metrics\n", shown);
	fflush(stderr);
	while (!serve_stop) {
		if (!serve_round(c, lfd, conns, &active, &pause_until, &waitmask)) {
			rc = EXIT_RUNTIME;
			break;
		}
	}
	for (int i = 0; i < CONN_MAX; i++)
		if (conns[i].fd >= 0)
			conn_close(&conns[i], &active);
	free(conns);
	close(lfd);
	return rc;
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
