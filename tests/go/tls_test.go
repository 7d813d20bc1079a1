package gotests

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TLS listeners (Kafka's SSL security protocol) with certificates the test
// makes itself (crypto/x509): one broker with a PLAINTEXT listener, an SSL
// listener and an SSL listener named MTLS that requires client certificates,
// configured with Kafka's keys (--listeners, --listener-security-protocol-map,
// --security ssl.*, listener.name.mtls.ssl.client.auth=required). franz-go
// dials with kgo.DialTLSConfig and verifies the broker's certificate for
// 127.0.0.1 against the test CA.

// testCA is a self-signed CA that signs server and client certificates.
type testCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	serial  int64
}

// issued is a certificate with its key, in PEM (key: PKCS#8, unencrypted).
type issued struct {
	certPEM, keyPEM []byte
}

func (i issued) tlsCertificate(t *testing.T) tls.Certificate {
	c, err := tls.X509KeyPair(i.certPEM, i.keyPEM)
	if err != nil {
		t.Fatalf("X509KeyPair: %v", err)
	}
	return c
}

func newTestCA(t *testing.T, cn string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(48 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), serial: 1}
}

// issue signs a server certificate (subjectAltName IP:127.0.0.1 and
// DNS:localhost, serverAuth) or a client certificate (clientAuth) for cn.
func (ca *testCA) issue(t *testing.T, cn string, server bool) issued {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"corelog"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(48 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return issued{
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}),
	}
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// tlsBroker is a broker with SSL and MTLS listeners, its CA and a client
// certificate the CA signed.
type tlsBroker struct {
	*broker
	ca    *testCA
	alice issued
}

func startTLSBroker(t *testing.T) *tlsBroker {
	t.Helper()
	dir := t.TempDir()
	ca := newTestCA(t, "corelog-test-ca")
	server := ca.issue(t, "localhost", true)
	keystore := filepath.Join(dir, "broker-keystore.pem") // Kafka's PEM keystore: the key, then the chain
	truststore := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(keystore, append(append([]byte{}, server.keyPEM...), server.certPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(truststore, ca.certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	b := startBrokerWithListeners(t, []listener{{"SSL", "SSL"}, {"MTLS", "SSL"}},
		"--security", "ssl.keystore.type=PEM",
		"--security", "ssl.keystore.location="+keystore,
		"--security", "ssl.truststore.type=PEM",
		"--security", "ssl.truststore.location="+truststore,
		"--security", "listener.name.mtls.ssl.client.auth=required",
	)
	return &tlsBroker{broker: b, ca: ca, alice: ca.issue(t, "alice", false)}
}

// tlsClient is a franz-go client seeded with listener name, trusting the test
// CA; cfg adjusts the TLS config (a client certificate, say).
func (b *tlsBroker) tlsClient(t *testing.T, name string, cfg func(*tls.Config), opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	// franz-go sets ServerName to the dialed host (127.0.0.1) when it is empty:
	// the broker's certificate is verified for that IP.
	tc := &tls.Config{RootCAs: b.ca.pool(), MinVersion: tls.VersionTLS12}
	if cfg != nil {
		cfg(tc)
	}
	// Fetches wait at most the Java client's 500 ms (franz-go's default is 5 s):
	// corelog's shutdown waits for a Fetch parked on a TLS connection to expire
	// even after the client has closed it (on PLAINTEXT it does not), which
	// would add 5 s to each test's teardown.
	return b.client(t, append([]kgo.Opt{kgo.SeedBrokers(b.listeners[name]), kgo.DialTLSConfig(tc),
		kgo.FetchMaxWait(500 * time.Millisecond)}, opts...)...)
}

func kadmOf(cl *kgo.Client) *kadm.Client { return kadm.NewClient(cl) }

// sortByOffset orders produced records by partition, then offset.
func sortByOffset(recs []*kgo.Record) {
	sort.Slice(recs, func(i, j int) bool {
		if recs[i].Partition != recs[j].Partition {
			return recs[i].Partition < recs[j].Partition
		}
		return recs[i].Offset < recs[j].Offset
	})
}

// TestTLSProduceConsumeAndMetadata: over the SSL listener, kadm creates a
// topic and is told the SSL listener's address; a producer (idempotent,
// acks=all) writes records from a few bytes to well over a TLS record (16 KiB)
// and a consumer group reads every one back, in order per partition, and
// commits.
func TestTLSProduceConsumeAndMetadata(t *testing.T) {
	b := startTLSBroker(t)
	const (
		topic      = "go-tls"
		group      = "go-tls-group"
		partitions = 3
		total      = 600
	)
	ctx := testCtx(t, 60*time.Second)
	adm := kadmOf(b.tlsClient(t, "SSL", nil))
	if r, err := adm.CreateTopic(ctx, partitions, 1, nil, topic); err != nil || r.Err != nil {
		t.Fatalf("CreateTopic over TLS: %v / %v", err, r.Err)
	}
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		t.Fatalf("metadata over TLS: %v", err)
	}
	sslAddr := b.listeners["SSL"]
	if len(md.Brokers) != 1 || net.JoinHostPort(md.Brokers[0].Host, itoa(int(md.Brokers[0].Port))) != sslAddr {
		t.Fatalf("metadata over SSL names %+v, want the SSL listener %s", md.Brokers, sslAddr)
	}

	prod := b.tlsClient(t, "SSL", nil, kgo.DefaultProduceTopic(topic))
	var recs []*kgo.Record
	for i := 0; i < total; i++ {
		v := fmt.Sprintf("tls-%d|%s", i, strings.Repeat("v", i%100))
		if i%50 == 7 {
			v = fmt.Sprintf("tls-%d|%s", i, strings.Repeat("y", 40_000))
		}
		recs = append(recs, &kgo.Record{Key: []byte(itoa(i)), Value: []byte(v)})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce over TLS: %v", err)
	}
	want := map[int32][]string{}
	sortByOffset(recs)
	for _, r := range recs {
		want[r.Partition] = append(want[r.Partition], string(r.Value))
	}

	cons := b.tlsClient(t, "SSL", nil, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	got := map[int32][]string{}
	n := 0
	for n < total {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records over TLS before the deadline", n, total)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Fatalf("fetch %s/%d over TLS: %v", tp, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			got[r.Partition] = append(got[r.Partition], string(r.Value))
			n++
		})
	}
	if err := cons.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit over TLS: %v", err)
	}
	for p := int32(0); p < partitions; p++ {
		if strings.Join(got[p], "\n") != strings.Join(want[p], "\n") {
			t.Errorf("partition %d: consumed %d records, want %d (or out of order)", p, len(got[p]), len(want[p]))
		}
	}
	offsets, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatalf("FetchOffsets over TLS: %v", err)
	}
	for p := int32(0); p < partitions; p++ {
		o, ok := offsets.Lookup(topic, p)
		if !ok || o.At != int64(len(want[p])) {
			t.Errorf("committed offset of partition %d: %+v (found %v), want %d", p, o, ok, len(want[p]))
		}
	}
}

// TestTLSMutualClientCertificate: the MTLS listener serves franz-go presenting
// a certificate the CA signed (produce and consume), and refuses a client
// without a certificate and one presenting a certificate another CA signed.
func TestTLSMutualClientCertificate(t *testing.T) {
	b := startTLSBroker(t)
	const topic = "go-mtls"
	ctx := testCtx(t, 60*time.Second)
	alice := b.alice.tlsCertificate(t)
	withAlice := func(c *tls.Config) { c.Certificates = []tls.Certificate{alice} }

	adm := kadmOf(b.tlsClient(t, "MTLS", withAlice))
	if r, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil || r.Err != nil {
		t.Fatalf("CreateTopic over mutual TLS: %v / %v", err, r.Err)
	}
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		t.Fatalf("metadata over mutual TLS: %v", err)
	}
	if len(md.Brokers) != 1 || net.JoinHostPort(md.Brokers[0].Host, itoa(int(md.Brokers[0].Port))) != b.listeners["MTLS"] {
		t.Fatalf("metadata over MTLS names %+v, want %s", md.Brokers, b.listeners["MTLS"])
	}
	prod := b.tlsClient(t, "MTLS", withAlice, kgo.DefaultProduceTopic(topic))
	for i := 0; i < 20; i++ {
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("m" + itoa(i))}).FirstErr(); err != nil {
			t.Fatalf("produce over mutual TLS: %v", err)
		}
	}
	cons := b.tlsClient(t, "MTLS", withAlice, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		topic: {0: kgo.NewOffset().AtStart()}}))
	var got []string
	for len(got) < 20 && ctx.Err() == nil {
		cons.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	for i, v := range got {
		if v != "m"+itoa(i) {
			t.Fatalf("consumed over mutual TLS: %q", got)
		}
	}
	if len(got) != 20 {
		t.Fatalf("consumed %d of 20 records over mutual TLS", len(got))
	}

	// Refused: franz-go's request fails (the handshake's alert), it does not hang.
	refusedBefore := b.metric(t, "corelog_failed_authentications_total")
	stranger := newTestCA(t, "stranger-ca").issue(t, "mallory", false).tlsCertificate(t)
	for _, c := range []struct {
		name string
		cfg  func(*tls.Config)
	}{
		{"no client certificate", nil},
		// Offered whatever CAs the broker names as acceptable (crypto/tls would
		// otherwise send no certificate at all), so the broker must verify it.
		{"a certificate another CA signed", func(c *tls.Config) {
			c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &stranger, nil }
		}},
	} {
		cl := b.tlsClient(t, "MTLS", c.cfg, kgo.RetryTimeout(2*time.Second), kgo.RequestRetries(1))
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		start := time.Now()
		err := cl.Ping(pctx)
		timedOut := pctx.Err() != nil
		cancel()
		if err == nil {
			t.Errorf("%s: the MTLS listener answered", c.name)
			continue
		}
		t.Logf("%s: refused after %v: %v", c.name, time.Since(start).Round(time.Millisecond), err)
		if timedOut {
			t.Errorf("%s: the ping ran into its deadline instead of failing: %v", c.name, err)
		}
	}
	// Every refusal is counted; the log has at most a line a second per shard
	// (with how many it left out), so the second may have no line of its own.
	if n := b.metric(t, "corelog_failed_authentications_total") - refusedBefore; n < 2 {
		t.Errorf("corelog_failed_authentications_total rose by %v, want 2", n)
	}
	if lines := b.logLines("TLS handshake failed"); len(lines) == 0 {
		t.Errorf("the broker logged no refused handshake")
	} else {
		for _, l := range lines {
			t.Logf("broker: %s", l)
		}
	}
}

// TestTLSClientOnPlaintextListenerAndPlaintextClientOnTLS: a TLS client on the
// PLAINTEXT listener and a plaintext client on the SSL listener both fail,
// and the broker keeps serving both listeners.
func TestTLSClientOnPlaintextListenerAndPlaintextClientOnTLS(t *testing.T) {
	b := startTLSBroker(t)
	ctx := testCtx(t, 30*time.Second)
	for name, cl := range map[string]*kgo.Client{
		"TLS to PLAINTEXT": b.client(t, kgo.DialTLSConfig(&tls.Config{RootCAs: b.ca.pool()}),
			kgo.RetryTimeout(2*time.Second), kgo.RequestRetries(1), kgo.DialTimeout(3*time.Second)),
		"plaintext to SSL": b.client(t, kgo.SeedBrokers(b.listeners["SSL"]),
			kgo.RetryTimeout(2*time.Second), kgo.RequestRetries(1), kgo.DialTimeout(3*time.Second)),
	} {
		pctx, cancel := context.WithTimeout(ctx, 8*time.Second)
		err := cl.Ping(pctx)
		cancel()
		if err == nil {
			t.Errorf("%s: answered", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	for _, name := range []string{"PLAINTEXT", "SSL"} {
		var cl *kgo.Client
		if name == "PLAINTEXT" {
			cl = b.client(t)
		} else {
			cl = b.tlsClient(t, name, nil)
		}
		if err := cl.Ping(ctx); err != nil {
			t.Errorf("%s listener after the mismatched clients: %v", name, err)
		}
	}
}
