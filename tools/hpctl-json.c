/* A tiny streaming JSON writer: enough for hpctl's --json output, which is
 * objects, arrays, strings and integers.  It tracks commas per nesting level
 * and escapes strings per RFC 8259. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "hpctl.h"

static void separator(struct json *j)
{
	if (j->depth > 0 && j->need_comma[j->depth])
		fputc(',', j->f);
	if (j->depth > 0)
		j->need_comma[j->depth] = true;
}

static void quoted(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		switch (*p) {
		case '"': fputs("\\\"", f); break;
		case '\\': fputs("\\\\", f); break;
		case '\n': fputs("\\n", f); break;
		case '\t': fputs("\\t", f); break;
		case '\r': fputs("\\r", f); break;
		default:
			if (*p < 0x20)
				fprintf(f, "\\u%04x", *p);
			else
				fputc(*p, f);
		}
	}
	fputc('"', f);
}

static void key_of(struct json *j, const char *key)
{
	separator(j);
	if (key) {
		quoted(j->f, key);
		fputc(':', j->f);
	}
}

void json_begin(struct json *j, FILE *f)
{
	j->f = f;
	j->depth = 0;
	j->need_comma[0] = false;
}

static void open_level(struct json *j, const char *key, char bracket)
{
	key_of(j, key);
	fputc(bracket, j->f);
	if (j->depth + 1 < (int)(sizeof(j->need_comma) / sizeof(j->need_comma[0])))
		j->depth++;
	j->need_comma[j->depth] = false;
}

void json_obj(struct json *j, const char *key) { open_level(j, key, '{'); }
void json_arr(struct json *j, const char *key) { open_level(j, key, '['); }

static void close_level(struct json *j, char bracket)
{
	fputc(bracket, j->f);
	if (j->depth > 0)
		j->depth--;
}

void json_end_obj(struct json *j) { close_level(j, '}'); }
void json_end_arr(struct json *j) { close_level(j, ']'); }

void json_str(struct json *j, const char *key, const char *val)
{
	key_of(j, key);
	if (val)
		quoted(j->f, val);
	else
		fputs("null", j->f);
}

void json_num(struct json *j, const char *key, long long val)
{
	key_of(j, key);
	fprintf(j->f, "%lld", val);
}

void json_u64(struct json *j, const char *key, unsigned long long val)
{
	key_of(j, key);
	fprintf(j->f, "%llu", val);
}

void json_bool(struct json *j, const char *key, bool val)
{
	key_of(j, key);
	fputs(val ? "true" : "false", j->f);
}

void json_null(struct json *j, const char *key)
{
	key_of(j, key);
	fputs("null", j->f);
}

void json_finish(struct json *j)
{
	fputc('\n', j->f);
}
