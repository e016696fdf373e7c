"""Options of the API service (oslo.config): ``[api]``; the broker, data
folder and database options it shares with the conductor are declared in
:mod:`fornace.common.options`; ``[healthcheck]`` is oslo.middleware's, which
registers it when the API starts (:mod:`fornace.api.healthcheck`: importing
it here would cost every command a fifth of a second)."""
from __future__ import annotations

from pathlib import Path

from oslo_config import cfg

from fornace.common import notifications, options
from fornace.common.packages.archive import PackageLimits

api_opts = [
    cfg.HostAddressOpt("host", default="127.0.0.1", help="Address the API listens on."),
    cfg.PortOpt("port", default=8082, help="Port the API listens on."),
    cfg.StrOpt("auth_mode", default="noauth", choices=["noauth", "keystone"],
               help="noauth: tenant and user from X-Tenant-Id/X-User-Id headers or the "
                    "defaults below; keystone: X-Auth-Token validated by Keystone."),
    cfg.StrOpt("default_tenant", default="demo", help="noauth tenant without X-Tenant-Id."),
    cfg.StrOpt("default_user", default="demo", help="noauth user without X-User-Id."),
    cfg.IntOpt("max_body_size", default=1024 * 1024, min=1024,
               help="Largest request body accepted, in bytes (larger: 413)."),
    cfg.IntOpt("workers", default=1, min=1,
               help="API worker processes; more than one needs a shared broker "
                    "([broker] url = amqp://...)."),
    cfg.ListOpt("allowed_origins", default=[],
                help="Web origins (scheme://host[:port], e.g. https://ui.example.com) "
                     "besides the API's own whose pages may send the JSON API changes "
                     "(POST, PUT, PATCH, DELETE) and the dashboard's forms. A browser "
                     "request whose Origin (or, without one, Referer) is another site is "
                     "refused with 403; "
                     "requests without either header (CLI, muranoclient, curl) are not "
                     "affected. Behind a reverse proxy the origin browsers use (e.g. "
                     "https://fornace.example.com) may not be the one the API sees: "
                     "list it here."),
    cfg.ListOpt("allowed_hosts", default=[],
                help="Host names (and IP addresses) clients reach the API and the "
                     "dashboard by, besides the ones always accepted: localhost, "
                     "127.0.0.1, ::1 and [api] host when it is one address (not "
                     "0.0.0.0 or ::). A request whose Host header names another host "
                     "is refused with 400: a web page of another site cannot reach the "
                     "API through a DNS name it points at this machine (DNS "
                     "rebinding). A name matches in any case and with any port; "
                     "'.example.com' matches example.com and every name below it; "
                     "'*' accepts any Host (the check is off). When the API listens on "
                     "every address (host = 0.0.0.0), list here the names and "
                     "addresses its users and clients type, e.g. "
                     "fornace.example.com,192.0.2.10; behind a reverse proxy, the "
                     "Host it forwards."),
    cfg.StrOpt("dashboard_secret", secret=True,
               help="Secret (16 characters or more) the dashboard signs its form "
                    "tokens with. Unset: a random one made once and kept in "
                    "state_dir/dashboard_secret. Set the same value on every machine "
                    "when several serve one dashboard behind a load balancer."),
    cfg.IntOpt("max_units_per_service", default=100, min=1,
               help="Most units one service may have: adding or changing a service "
                    "in a session, or a scale job, that would go above it is a 400."),
    cfg.IntOpt("max_units_per_environment", default=500, min=1,
               help="Most units all services of one environment may have together: "
                    "a session change or a scale job that would go above it is a 400."),
    cfg.IntOpt("max_package_bytes", default=16 * 1024 * 1024, min=1024,
               help="Largest workflow package archive accepted by POST /packages, in "
                    "bytes (larger: 413); other request bodies stay under "
                    "max_body_size."),
    cfg.IntOpt("max_package_files", default=1000, min=1,
               help="Most files a workflow package archive may hold (more: 400)."),
    cfg.IntOpt("max_package_unpacked_bytes", default=64 * 1024 * 1024, min=1024,
               help="Most bytes a workflow package's files may expand to, counted as "
                    "they are unpacked (more: 400, whatever sizes the archive "
                    "declares: a zip bomb stops there)."),
    cfg.BoolOpt("access_log", default=True, help="Log one line per HTTP request."),
    cfg.URIOpt("public_endpoint", schemes=["http", "https"],
               help="The URL clients reach the API by (e.g. "
                    "https://fornace.example.com:8082), for the links of version "
                    "discovery (GET / and GET /v1/). Unset: the scheme and Host of "
                    "each request. Set it when the API is behind a proxy or a load "
                    "balancer that does not forward the Host clients used."),
]


def register(conf: cfg.ConfigOpts) -> None:
    """``[api]``, and the shared options the API reads: the broker, the data
    folder (the catalog it serves) and the database (with ``[api] state_dir``)."""
    conf.register_opts(api_opts, group="api")
    options.register_broker(conf)
    options.register_data_folder(conf)
    options.register_database(conf)


def catalog_file(conf: cfg.ConfigOpts) -> Path:
    """The type catalog the conductor uses: ``types.json`` of the data folder
    (``data_dir``), or the built-in one when that folder has none -- as
    templates fall back."""
    from fornace.common.catalog import catalog_file   # the catalog's imports: when used

    return catalog_file(options.data_folder(conf))


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    """For oslo-config-generator (``etc/fornace.conf.sample``; the shared options
    are :mod:`fornace.common.options`', ``[healthcheck]`` oslo.middleware's own
    namespace's), with oslo.messaging's options of the notifications the API
    sends (registered when it starts: :func:`fornace.common.notifications.register`)."""
    return [("api", api_opts)] + notifications.list_opts()


def package_limits(conf: cfg.ConfigOpts) -> PackageLimits:
    """The ``[api]`` limits on uploaded workflow packages."""
    return PackageLimits(max_bytes=conf.api.max_package_bytes,
                         max_files=conf.api.max_package_files,
                         max_unpacked_bytes=conf.api.max_package_unpacked_bytes)
