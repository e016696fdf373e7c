"""What a broker URL names, without loading kombu (the engine and the CLI's
workflow tools read it; only the daemons need a transport).

``[broker] url`` may name several RabbitMQ nodes of one cluster, kombu's
failover form: the URLs one after the other, ``;`` between them::

    amqp://fornace:pw@mq1:5672/fornace;amqp://fornace:pw@mq2:5672/fornace

A connection goes to the first node that answers; when it breaks, the next
connection tries the others (:mod:`fornace.common.broker`). :func:`hosts`
checks such a URL part by part and names the part that is wrong;
:func:`masked` is the URL as logs and messages show it (every password
masked).
"""
from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from fornace.common.errors import FornaceError

#: The scheme of the folder broker (:mod:`fornace.common.folderbroker`).
FOLDER_SCHEME = "filesystem"
MEMORY_SCHEME = "memory"
AMQP_SCHEMES = ("amqp", "amqps", "pyamqp")
AMQP_PORT = 5672
SEPARATOR = ";"
MASK = "**"   # kombu's, so one URL reads the same in kombu's messages and ours


class BrokerUrlError(FornaceError, ValueError):
    """A ``[broker] url`` that cannot be used; the message names the host and
    what is wrong with it, passwords masked."""


@dataclass(frozen=True)
class Host:
    """One RabbitMQ node of a broker URL (its parts unquoted)."""
    url: str
    scheme: str
    host: str
    port: int
    login: str | None
    password: str | None
    virtual_host: str


def is_folder_url(url: str) -> bool:
    """True for ``filesystem:///folder`` URLs."""
    return _scheme(url) == FOLDER_SCHEME


def parts(url: str) -> list[str]:
    """The URLs of a failover URL, spaces around ``;`` removed (empty ones kept)."""
    return [part.strip() for part in url.split(SEPARATOR)]


def hosts(url: str) -> list[Host]:
    """The AMQP nodes ``url`` names, in order ([] for memory:// and filesystem://).

    Raises :class:`BrokerUrlError` naming the host (its number, and its URL
    with the password masked) and what is wrong: an empty part, no scheme, a
    scheme Fornace does not speak, no host name, a bad port, a virtual host
    other than the first host's, or memory:// / filesystem:// among others.
    """
    found: list[Host] = []
    listed = parts(url)
    for number, part in enumerate(listed, 1):
        where = f"[broker] url, host {number} of {len(listed)}" if len(listed) > 1 \
            else "[broker] url"
        if not part:
            raise BrokerUrlError(f"{where}: empty (two ';' in a row, or one at an end)")
        where += f" ({masked(part)})"
        if "://" not in part:
            raise BrokerUrlError(f"{where}: not a URL "
                                 "(scheme://user:password@host:port/vhost)")
        scheme = _scheme(part)
        if scheme in (MEMORY_SCHEME, FOLDER_SCHEME):
            if len(listed) > 1:
                raise BrokerUrlError(f"{where}: memory:// and filesystem:// take no other host")
            return []
        if scheme not in AMQP_SCHEMES:
            known = AMQP_SCHEMES if len(listed) > 1 else (MEMORY_SCHEME, FOLDER_SCHEME,
                                                          *AMQP_SCHEMES)
            raise BrokerUrlError(f"{where}: the scheme {scheme!r} is not one of "
                                 f"{', '.join(known)}")
        host = _host(part, where)
        if found and host.virtual_host != found[0].virtual_host:
            raise BrokerUrlError(f"{where}: the virtual host {host.virtual_host!r} is not that "
                                 f"of host 1 ({found[0].virtual_host!r}): the hosts of one URL "
                                 "are one cluster")
        found.append(host)
    return found


def check(url: str) -> None:
    """Refuse a bad ``[broker] url`` (:class:`BrokerUrlError`, see :func:`hosts`):
    what a daemon does before it starts anything."""
    hosts(url)


def _host(part: str, where: str) -> Host:
    split = urlsplit(part)
    port_text = split.netloc.rpartition("@")[2].rpartition("]")[2].partition(":")[2]
    try:
        port = split.port
    except ValueError:
        port = None
    if port_text and (port is None or not 0 < port < 65536):
        raise BrokerUrlError(f"{where}: the port {port_text!r} is not a number from 1 to 65535")
    if not split.hostname:
        raise BrokerUrlError(f"{where}: no host name")
    # kombu's reading of the path: "/" and "" are the default vhost "/"
    path = split.path[1:] if split.path.startswith("/") else split.path
    return Host(url=part, scheme=split.scheme, host=split.hostname, port=port or AMQP_PORT,
                login=unquote(split.username) if split.username is not None else None,
                password=unquote(split.password) if split.password is not None else None,
                virtual_host=unquote(path) or "/")


def masked(url: str) -> str:
    """``url`` with the password of every host replaced by ``**``."""
    return SEPARATOR.join(_masked_one(part) for part in url.split(SEPARATOR))


def _masked_one(part: str) -> str:
    # from the first ':' of the user part to the last '@': a password holding
    # '/' or '@' unquoted is masked whole (a vhost holding '@' masks more)
    head, found, rest = part.rpartition("://")
    userinfo, at, hostpart = rest.rpartition("@")
    if not at or ":" not in userinfo:
        return part
    return f"{head}{found}{userinfo.partition(':')[0]}:{MASK}@{hostpart}"


def passwords(url: str) -> list[str]:
    """The password of every host of ``url`` (to mask them in free text)."""
    found = []
    for part in parts(url):
        try:
            password = urlsplit(part).password
        except ValueError:
            continue
        if password:
            found += [password, unquote(password)]
    return found


def _scheme(url: str) -> str:
    return url.strip().split(":", 1)[0].lower()
