/*
 * tools/env_defaults.h — what a program using Tailwind does at the start of main, before any
 * thread: set the libfabric variables whose defaults do not suit it (the TW_ENV_PROGRAM rows of
 * tw_env_describe(), tailwind/common.h), unless the environment sets them. The library never
 * writes the environment (setenv() would race the program's threads); a program may, while it
 * has one thread. twd, twctl and twbench call it; docs/fabric.md, "Provider environment defaults".
 */
#ifndef TW_TOOLS_ENV_DEFAULTS_H
#define TW_TOOLS_ENV_DEFAULTS_H

#include <stdlib.h>

#include <tailwind/common.h>

static inline void tw_tools_env_defaults(void)
{
	const struct tw_env_var *v;

	for (size_t i = 0; (v = tw_env_describe(i)) != NULL; i++)
		if ((v->flags & TW_ENV_PROGRAM) && !getenv(v->name))
			setenv(v->name, v->default_value, 0);
}

#endif /* TW_TOOLS_ENV_DEFAULTS_H */
