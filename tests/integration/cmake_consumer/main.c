/* The CMake consumer (CMakeLists.txt beside it): calls the installed library through its public
 * header only. Prints the library's version and one error string; exit 0 when the version is
 * the one given as argv[1]. */
#include <stdio.h>
#include <string.h>

#include <tailwind/tailwind.h>

int main(int argc, char **argv)
{
	const char *v = tw_version();
	struct tw_ctx_config tc;

	tw_ctx_config_init(&tc);
	printf("tailwind %s\n", v);
	printf("TW_ELOGEXISTS: %s\n", tw_strerror(-TW_ELOGEXISTS));
	printf("default provider: %s\n", tc.provider ? tc.provider : "(library's choice)");
	return argc > 1 && strcmp(argv[1], v) == 0 ? 0 : 1;
}
