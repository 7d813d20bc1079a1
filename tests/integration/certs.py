"""Certificates made by the tests themselves, with the openssl command line: a CA,
server certificates for 127.0.0.1/localhost, and client certificates, all in PEM.
Keys are unencrypted PKCS#8 (what `ssl.keystore.key` takes)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@dataclass
class Issued:
    cert: Path   # the certificate (PEM)
    key: Path    # its private key (PEM, PKCS#8)
    chain: Path  # key + certificate in one file (Kafka's PEM keystore file)


class CertificateAuthority:
    """A self-signed CA in ``dir``; ``issue`` signs server or client certificates."""

    def __init__(self, dir: Path, name: str = "corelog-test-ca"):
        self.dir = dir
        dir.mkdir(parents=True, exist_ok=True)
        self.cert = dir / f"{name}.pem"
        self.key = dir / f"{name}.key"
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                 "-nodes", "-keyout", str(self.key), "-out", str(self.cert), "-days", "2",
                 "-subj", f"/CN={name}", cwd=dir)

    def issue(self, name: str, cn: str, server: bool = False, client: bool = False) -> Issued:
        """A certificate for ``cn``: a server's (127.0.0.1/localhost) when ``server``, a
        client's otherwise; ``server`` and ``client`` both make a broker's, which serves
        and also connects to other brokers with it (mutual TLS between brokers)."""
        key, csr, cert = (self.dir / f"{name}.{ext}" for ext in ("key", "csr", "pem"))
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={cn}/O=corelog",
                 cwd=self.dir)
        ext = self.dir / f"{name}.ext"
        if server:
            usage = "serverAuth,clientAuth" if client else "serverAuth"
            ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                           f"extendedKeyUsage={usage}\n")
        else:
            ext.write_text("extendedKeyUsage=clientAuth\n")
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(self.cert), "-CAkey",
                 str(self.key), "-CAcreateserial", "-out", str(cert), "-days", "2",
                 "-extfile", str(ext), cwd=self.dir)
        chain = self.dir / f"{name}-keystore.pem"
        chain.write_text(key.read_text() + cert.read_text())
        return Issued(cert=cert, key=key, chain=chain)

    def issue_v1(self, name: str, cn: str) -> Issued:
        """A client certificate of X.509 version 1 (no extensions), as `openssl x509 -req`
        without -extfile and some older tooling make them."""
        key, csr, cert = (self.dir / f"{name}.{ext}" for ext in ("key", "csr", "pem"))
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={cn}/O=corelog",
                 cwd=self.dir)
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(self.cert), "-CAkey",
                 str(self.key), "-CAcreateserial", "-out", str(cert), "-days", "2", cwd=self.dir)
        chain = self.dir / f"{name}-keystore.pem"
        chain.write_text(key.read_text() + cert.read_text())
        return Issued(cert=cert, key=key, chain=chain)
