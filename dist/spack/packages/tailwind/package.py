# Tailwind's Spack recipe (docs/packaging.md, "Spack"). Add the repository with
# `spack repo add dist/spack`, then `spack install tailwind` (or, from a checkout,
# `spack dev-build -d . tailwind@1.0.0`).
from spack.package import *


class Tailwind(MesonPackage):
    """Tailwind replicates an append-only in-memory log from a primary to backups with
    one-sided RDMA writes over libfabric (verbs, or tcp, sockets and shm without RDMA
    hardware), and rebuilds the log from the backups when the primary dies. A C library
    (libtailwind) and three programs: twd (the backup daemon), twctl and twbench."""

    # No public release location yet: a release tarball is `meson dist` of a tagged tree;
    # a site that mirrors it sets `url` (or a `spack mirror`) and the sha256 below.
    homepage = "https://tailwind.invalid"
    url = "https://tailwind.invalid/releases/tailwind-1.0.0.tar.xz"

    license("MIT")

    # `spack dev-build -d <checkout> tailwind@1.0.0` builds a checkout without fetching.
    version("1.0.0")

    variant(
        "zookeeper",
        default=True,
        description="The ZooKeeper coordinator: zk:// URLs, standbys (meson -Dcoordinator)",
    )
    variant(
        "metrics",
        default=True,
        description="/metrics in the Prometheus text format on twd and twkv (meson -Dmetrics)",
    )
    variant(
        "kv",
        default=False,
        description="Build and install the key-value example twkv and twkv-ycsb (meson -Dkv)",
    )

    depends_on("c", type="build")
    depends_on("meson@1.0.0:", type="build")
    depends_on("ninja", type="build")
    depends_on("pkgconfig", type="build")
    depends_on("python@3:", type="build")  # generates tailwind(7)
    depends_on("help2man", type="build")  # twd(8), twctl(8), twbench(1)

    depends_on("libfabric@1.17:")
    depends_on("protobuf-c@1.4:")  # the library and protoc-c, which generates the wire code
    depends_on("libsodium@1.0.18:")
    depends_on("zookeeper-c", when="+zookeeper")
    depends_on("libmicrohttpd@0.9.71:", when="+metrics")  # twd's and twkv's HTTP server only

    def meson_args(self):
        spec = self.spec
        return [
            "-Dcoordinator=" + ("enabled" if spec.satisfies("+zookeeper") else "disabled"),
            "-Dkv=" + ("enabled" if spec.satisfies("+kv") else "disabled"),
            "-Dmetrics=" + ("enabled" if spec.satisfies("+metrics") else "disabled"),
            "-Dman=enabled",
            "-Dtests=" + ("true" if self.run_tests else "false"),
            # The units under the prefix, as a source install puts them.
            "-Dsystemdunitdir=" + join_path(self.prefix, "lib", "systemd", "system"),
        ]

    def setup_run_environment(self, env):
        env.prepend_path("CMAKE_PREFIX_PATH", self.prefix)
