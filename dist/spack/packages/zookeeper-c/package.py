# ZooKeeper's C client (libzookeeper_mt), which Tailwind's coordinator uses (docs/packaging.md,
# "Spack"). Spack's builtin `zookeeper` package installs the Java server, not the C client; this
# recipe stands for the client as an external (the operating system's package), declared in
# packages.yaml:
#
#   packages:
#     zookeeper-c:
#       externals:
#       - spec: zookeeper-c@3.8.0
#         prefix: /usr            # Debian 12: libzookeeper-mt-dev
#       buildable: false
from spack.package import *


class ZookeeperC(Package):
    """The C client library of Apache ZooKeeper (libzookeeper_mt, zookeeper/zookeeper.h),
    used as an external: install it with the system's package manager (Debian and Ubuntu:
    libzookeeper-mt-dev; RHEL and Fedora: zookeeper-devel) and declare it in packages.yaml."""

    homepage = "https://zookeeper.apache.org/"
    url = "https://archive.apache.org/dist/zookeeper/zookeeper-3.8.4/apache-zookeeper-3.8.4.tar.gz"

    license("Apache-2.0")

    # The client's build needs the jute code generator from the Java build (maven); no
    # recipe builds that here, so only externals are used.
    version("3.8.0")

    @property
    def libs(self):
        return find_libraries("libzookeeper_mt", root=self.prefix, recursive=True)

    def install(self, spec, prefix):
        raise InstallError(
            "zookeeper-c is not built by Spack here: install ZooKeeper's C client with the "
            "system's package manager (Debian: libzookeeper-mt-dev) and declare it as an "
            "external in packages.yaml (see the comment at the top of this file), or build "
            "tailwind~zookeeper"
        )
