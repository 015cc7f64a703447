"""The master's TLS certificate (cluster-up --tls-cert/--tls-key): checked once at
cluster-up, then served by the gateway's gRPC and HTTP ports (and nats-server's client
port when the cluster listens beyond loopback), and trusted by the clients on this
machine that dial it by an address the certificate may not name."""

import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported when a certificate is read: cluster-up without TLS never loads it
    from cryptography import x509


class TlsError(Exception):
    """The certificate or key cannot serve TLS: the message says why."""


@dataclass(frozen=True)
class MasterCertificate:
    """What the clients on this machine need to check the master's certificate."""

    # Given to the services and trials as DET_MASTER_CERT_FILE when the certificate is
    # self-signed (it is then its own CA); "": one a CA signed, checked against the system's.
    trust_file: str
    # The names (DNS names and IP addresses) it is valid for.
    names: tuple[str, ...]

    def name_to_check(self, host: str) -> str:
        """DET_MASTER_CERT_NAME for a client that dials `host`: "" when the certificate
        names it, else the certificate's first name."""
        if host in self.names or (host == "127.0.0.1" and "localhost" in self.names):
            return ""
        return self.names[0] if self.names else ""


def check_pair(cert_file: Path, key_file: Path) -> None:
    """TlsError unless both files exist, parse as PEM and the key is the certificate's."""
    for path, what in ((cert_file, "--tls-cert"), (key_file, "--tls-key")):
        if not path.is_file():
            raise TlsError(f"{what} {path}: no such file")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)

    def encrypted() -> str:  # asked for the key's passphrase (else OpenSSL asks on the terminal)
        raise TlsError(
            f"--tls-key {key_file} is encrypted: the gateway and nats-server need it without a passphrase"
        )

    try:
        context.load_cert_chain(cert_file, key_file, password=encrypted)
    except ssl.SSLError as error:
        raise TlsError(
            f"--tls-cert {cert_file} and --tls-key {key_file} are not a PEM certificate and its private key "
            f"({error.reason or error})"
        ) from None
    except OSError as error:
        raise TlsError(f"cannot read --tls-cert {cert_file} or --tls-key {key_file}: {error}") from None


def master_certificate(cert_file: Path) -> MasterCertificate:
    """The names and trust of the first certificate in `cert_file` (checked by check_pair)."""
    from cryptography import x509

    certificate = x509.load_pem_x509_certificates(cert_file.read_bytes())[0]
    self_signed = certificate.issuer == certificate.subject
    return MasterCertificate(str(cert_file) if self_signed else "", _names(certificate))


def _names(certificate: "x509.Certificate") -> tuple[str, ...]:
    """Its subject alternative names (DNS, then IP), else its common name."""
    from cryptography import x509

    try:
        alternatives = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        common = certificate.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
        return tuple(str(attribute.value) for attribute in common)
    dns = alternatives.get_values_for_type(x509.DNSName)
    ips = alternatives.get_values_for_type(x509.IPAddress)
    return (*dns, *(str(ip) for ip in ips))


def tls_environment(cert_file: str, key_file: str, dialed_host: str) -> dict[str, str]:
    """The services' TLS settings ("" cert_file: none): the gateway serves with the pair
    (DET_TLS_*), and clients that dial `dialed_host` (agents pass them to their trials) check
    the certificate with DET_MASTER_CERT_FILE and DET_MASTER_CERT_NAME where needed."""
    if not cert_file:
        return {}
    certificate = master_certificate(Path(cert_file))
    environment = {"DET_TLS_CERT_FILE": cert_file, "DET_TLS_KEY_FILE": key_file}
    if certificate.trust_file:
        environment["DET_MASTER_CERT_FILE"] = certificate.trust_file
    name = certificate.name_to_check(dialed_host)
    if name:
        environment["DET_MASTER_CERT_NAME"] = name
    return environment


def nats_tls(cert_file: str, key_file: str, listen_host: str) -> tuple[str, str] | None:
    """The files nats-server's client port serves TLS with: the master's, when it listens
    beyond loopback (agents on other machines connect); None: plaintext, this machine only."""
    if not cert_file or is_loopback(listen_host):
        return None
    return cert_file, key_file


def is_loopback(host: str) -> bool:
    """Whether `host` (an address to listen on) is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
