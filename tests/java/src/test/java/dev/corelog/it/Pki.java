package dev.corelog.it;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * Certificates made by the tests themselves with the openssl command line (the Java twin
 * of tests/integration/certs.py): a self-signed CA, server certificates for
 * 127.0.0.1/localhost and client certificates, all PEM, with unencrypted PKCS#8 EC P-256
 * keys (what corelog's {@code ssl.keystore.location} and the Java client's
 * {@code ssl.keystore.key} take).
 */
final class Pki {

    /** One issued certificate. */
    record Issued(Path cert, Path key, Path chain) {
        /** The certificate (PEM). */
        String certPem() {
            return read(cert);
        }

        /** Its private key (PEM, PKCS#8, unencrypted). */
        String keyPem() {
            return read(key);
        }
    }

    final Path dir;
    /** The CA's certificate: what a truststore holds. */
    final Path cert;
    private final Path key;

    private Pki(Path dir, String name) {
        this.dir = dir;
        this.cert = dir.resolve(name + ".pem");
        this.key = dir.resolve(name + ".key");
    }

    /** A new self-signed CA in {@code dir} (created if need be). */
    static Pki create(Path dir, String name) {
        try {
            Files.createDirectories(dir);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        Pki ca = new Pki(dir, name);
        ca.openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", ca.key.toString(), "-out", ca.cert.toString(), "-days", "2", "-subj", "/CN=" + name);
        return ca;
    }

    /**
     * Signs a certificate for {@code cn}: a server one (subjectAltName IP:127.0.0.1 and
     * DNS:localhost, serverAuth) or a client one (clientAuth). Its key and certificate are
     * also written together to {@code <name>-keystore.pem} (Kafka's PEM keystore file).
     */
    Issued issue(String name, String cn, boolean server) {
        Path k = dir.resolve(name + ".key");
        Path csr = dir.resolve(name + ".csr");
        Path c = dir.resolve(name + ".pem");
        Path ext = dir.resolve(name + ".ext");
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", k.toString(), "-out", csr.toString(), "-subj", "/CN=" + cn + "/O=corelog");
        write(ext, server
                ? "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
                : "extendedKeyUsage=clientAuth\n");
        openssl("x509", "-req", "-in", csr.toString(), "-CA", cert.toString(), "-CAkey", key.toString(),
                "-CAcreateserial", "-out", c.toString(), "-days", "2", "-extfile", ext.toString());
        Path chain = dir.resolve(name + "-keystore.pem");
        write(chain, read(k) + read(c));
        return new Issued(c, k, chain);
    }

    /**
     * {@code issued}'s key and certificate as a PKCS#12 keystore protected by
     * {@code password} (for clients configured with a keystore file, such as Kafka's CLI
     * tools' {@code --command-config}).
     */
    Path pkcs12(Issued issued, String password) {
        Path p12 = issued.cert().resolveSibling(issued.cert().getFileName().toString().replace(".pem", ".p12"));
        openssl("pkcs12", "-export", "-inkey", issued.key().toString(), "-in", issued.cert().toString(),
                "-name", "client", "-out", p12.toString(), "-passout", "pass:" + password);
        return p12;
    }

    private void openssl(String... args) {
        List<String> cmd = new ArrayList<>(List.of("openssl"));
        cmd.addAll(List.of(args));
        try {
            Process p = new ProcessBuilder(cmd).directory(dir.toFile()).redirectErrorStream(true).start();
            p.getOutputStream().close();
            String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            if (!p.waitFor(30, TimeUnit.SECONDS) || p.exitValue() != 0) {
                p.destroyForcibly();
                throw new IllegalStateException("failed: " + String.join(" ", cmd) + "\n" + out);
            }
        } catch (IOException e) {
            throw new UncheckedIOException("cannot run openssl (needed to make the TLS tests' certificates)", e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    private static String read(Path p) {
        try {
            return Files.readString(p, StandardCharsets.US_ASCII);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static void write(Path p, String text) {
        try {
            Files.writeString(p, text, StandardCharsets.US_ASCII);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
