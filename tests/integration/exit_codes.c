/*
 * tests/integration/exit_codes.c — one table of exit codes for twd, twctl and twbench
 * (tools/exit.h): the same mistake gives the same code in each program, and each --help prints
 * the same table (the man pages are made from --help). Before, an unknown provider exited 4
 * from twd, 2 from twbench and 1 from twctl.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_run.h"
#include "proc.h"
#include "tap.h"
#include "tmpdir.h"

static char twd[1024], twctl[1024], twbench[1024], dir[256];

static int run(char *const argv[], struct cli_out *o)
{
	return cli_run(argv, (char *[]){ (char *)"TW_BACKUPS=", NULL }, NULL, 0, 60000, o);
}

/* The "Exit status" section of a --help text, to its end. */
static const char *table(const char *help)
{
	const char *t = strstr(help, "Exit status (one table for twd, twctl and twbench):");

	return t ? t : "";
}

/* Runs argv[0..3) (twd's, twctl's and twbench's command lines): their exit statuses in st and,
 * when tab is not NULL, the exit status table of each one's stdout in tab. */
static void run3(char *const *const argv[3], int st[3], char (*tab)[4096])
{
	struct cli_out o;

	for (int i = 0; i < 3; i++) {
		st[i] = run(argv[i], &o);
		if (tab)
			snprintf(tab[i], sizeof(tab[i]), "%s", table(o.out));
		cli_out_free(&o);
	}
}

int main(void)
{
	struct cli_out o;
	char tab[3][4096];
	int st[3];
	/* Mistakes that give one code in each program. */
	const struct {
		const char *what;
		int code;
		char *const *argv[3];
	} same[] = {
		{ "an unknown provider", 4,
		  { (char *[]){ twd, (char *)"-p", (char *)"nosuch", (char *)"-d", dir, NULL },
		    (char *[]){ twctl, (char *)"-p", (char *)"nosuch", (char *)"-b",
				(char *)"127.0.0.1:1", (char *)"stat", NULL },
		    (char *[]){ twbench, (char *)"--provider", (char *)"nosuch", (char *)"--count",
				(char *)"10", NULL } } },
		{ "an unknown option", 2,
		  { (char *[]){ twd, (char *)"--bogus", NULL },
		    (char *[]){ twctl, (char *)"--bogus", NULL },
		    (char *[]){ twbench, (char *)"--bogus", NULL } } },
	};

	if (proc_find_tool("tools/twd", twd, sizeof(twd)) != 0 ||
	    proc_find_tool("tools/twctl", twctl, sizeof(twctl)) != 0 ||
	    proc_find_tool("tools/twbench", twbench, sizeof(twbench)) != 0)
		tap_plan_skip_all("twd, twctl or twbench not built");
	tmpdir_make(dir, sizeof(dir), NULL, "tw-exit");
	tap_plan(5);

	/* --help: one table in each. */
	{
		char *const *argv[3] = { (char *[]){ twd, (char *)"--help", NULL },
					  (char *[]){ twctl, (char *)"--help", NULL },
					  (char *[]){ twbench, (char *)"--help", NULL } };

		run3(argv, st, tab);
		ok(st[0] == 0 && st[1] == 0 && st[2] == 0 && tab[0][0] &&
		   strcmp(tab[0], tab[1]) == 0 && strcmp(tab[0], tab[2]) == 0 &&
		   strstr(tab[0], "  6  no such log"),
		   "twd, twctl and twbench --help end with the same exit status table");
	}

	/* The same mistake, the same code everywhere. */
	for (size_t k = 0; k < sizeof(same) / sizeof(same[0]); k++) {
		run3(same[k].argv, st, NULL);
		ok(st[0] == same[k].code && st[1] == same[k].code && st[2] == same[k].code,
		   "%s: exit %d from twd, twctl and twbench (%d, %d, %d)", same[k].what, same[k].code,
		   st[0], st[1], st[2]);
	}

	/* A storage directory that cannot be made: 3 (twd's --dir, twbench's $TMPDIR). */
	{
		char *const a0[] = { twd, (char *)"-d", (char *)"/proc/1/nope/d", NULL };
		char *const a1[] = { twbench, (char *)"--count", (char *)"10", NULL };

		st[0] = run(a0, &o);
		cli_out_free(&o);
		st[1] = cli_run(a1, (char *[]){ (char *)"TMPDIR=/proc/1/nope", NULL }, NULL, 0, 60000,
				&o);
		cli_out_free(&o);
		ok(st[0] == 3 && st[1] == 3, "a storage directory that cannot be made: exit 3 from "
		   "twd and twbench (%d, %d)", st[0], st[1]);
	}

	/* twctl recover -o FILE where FILE cannot be made: 3 too (no backup answers, so the
	 * log check cannot say "no such log" and the output is opened). */
	{
		char *const a[] = { twctl, (char *)"-p", (char *)"tcp", (char *)"-b",
				    (char *)"127.0.0.1:1", (char *)"recover", (char *)"5", (char *)"-o",
				    (char *)"/proc/1/nope/out", NULL };

		st[0] = run(a, &o);
		ok(st[0] == 3 && strstr(o.err, "cannot create"), "twctl recover -o into a directory "
		   "that cannot be made: exit 3 (%d)", st[0]);
		cli_out_free(&o);
	}
	rmdir(dir);
	tmpdir_remove(dir);
	return tap_exit();
}
