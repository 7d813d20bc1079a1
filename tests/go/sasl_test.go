package gotests

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// SASL listeners (Kafka's SASL_PLAINTEXT and SASL_SSL) with franz-go's own
// mechanisms (pkg/sasl/scram, pkg/sasl/plain): one broker with a PLAINTEXT
// listener, a SASL_PLAINTEXT listener enabling PLAIN, SCRAM-SHA-256 and
// SCRAM-SHA-512 (PLAIN users from its plain.sasl.jaas.config, in a config
// file) and a SASL_SSL listener enabling SCRAM-SHA-512 only, configured with
// Kafka's keys. SCRAM users are made with kadm (AlterUserScramCredentials,
// which salts the password client-side) over PLAINTEXT.

const (
	aliceSha512 = "alice-secret"
	aliceSha256 = "alice-secret-256"
	carolPlain  = "carol-secret"
)

// saslBroker is a broker with SASL_PLAINTEXT and SASL_SSL listeners and the CA
// that signed the SASL_SSL listener's certificate.
type saslBroker struct {
	*broker
	ca *testCA
}

func startSASLBroker(t *testing.T) *saslBroker {
	t.Helper()
	dir := t.TempDir()
	ca := newTestCA(t, "corelog-test-ca")
	server := ca.issue(t, "localhost", true)
	keystore := filepath.Join(dir, "broker-keystore.pem") // Kafka's PEM keystore: the key, then the chain
	if err := os.WriteFile(keystore, append(append([]byte{}, server.keyPEM...), server.certPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	// The PLAIN users' passwords in a config file, not on the command line.
	config := filepath.Join(dir, "server.toml")
	if err := os.WriteFile(config, []byte("[listener.name.sasl_plaintext]\n"+
		"'plain.sasl.jaas.config' = 'org.apache.kafka.common.security.plain.PlainLoginModule required "+
		`user_carol="`+carolPlain+`";'`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startBrokerWithListeners(t, []listener{{"SASL_PLAINTEXT", "SASL_PLAINTEXT"}, {"SASL_SSL", "SASL_SSL"}},
		"--config", config,
		"--security", "ssl.keystore.location="+keystore,
		"--security", "listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512",
		"--security", "listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
		"--security", "connection.failed.authentication.delay.ms=100",
	)
	return &saslBroker{broker: b, ca: ca}
}

// saslClient is a franz-go client seeded with listener name (SASL_SSL: over
// TLS, trusting the test CA) authenticating with mech.
func (b *saslBroker) saslClient(t *testing.T, name string, mech sasl.Mechanism, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	// Fetches wait at most the Java client's 500 ms (franz-go's default is 5 s):
	// corelog's shutdown at the test's end may wait out a Fetch parked by a
	// consumer that has already closed (seen on every listener, PLAINTEXT too,
	// in some runs), which would add up to 5 s.
	base := []kgo.Opt{kgo.SeedBrokers(b.listeners[name]), kgo.SASL(mech), kgo.FetchMaxWait(500 * time.Millisecond)}
	if name == "SASL_SSL" {
		base = append(base, kgo.DialTLSConfig(&tls.Config{RootCAs: b.ca.pool(), MinVersion: tls.VersionTLS12}))
	}
	return b.client(t, append(base, opts...)...)
}

func scram512(user, pass string) sasl.Mechanism {
	return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()
}

func scram256(user, pass string) sasl.Mechanism {
	return scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()
}

// TestSASL: kadm makes alice's SCRAM-SHA-512 and SCRAM-SHA-256 credentials
// and describes them; then franz-go produces and consumes (in a group) with
// SCRAM-SHA-512 over SASL_SSL, SCRAM-SHA-256 over SASL_PLAINTEXT and PLAIN
// over SASL_PLAINTEXT, each told its own listener's address; and refused
// logins (a wrong password, an unknown user, a mechanism the listener does not
// enable) fail the client's request at once with Kafka's error.
func TestSASL(t *testing.T) {
	b := startSASLBroker(t)
	ctx := testCtx(t, 90*time.Second)
	adm, _ := b.admin(t)
	altered, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{
		{User: "alice", Mechanism: kadm.ScramSha512, Iterations: 8192, Password: aliceSha512},
		{User: "alice", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: aliceSha256},
	})
	if err == nil {
		err = altered.Error()
	}
	if err != nil {
		t.Fatalf("AlterUserSCRAMs: %v", err)
	}
	described, err := adm.DescribeUserSCRAMs(ctx, "alice")
	if err == nil {
		err = described.Error()
	}
	if err != nil {
		t.Fatalf("DescribeUserSCRAMs: %v", err)
	}
	creds := map[kadm.ScramMechanism]int32{}
	for _, c := range described["alice"].CredInfos {
		creds[c.Mechanism] = c.Iterations
	}
	if want := map[kadm.ScramMechanism]int32{kadm.ScramSha512: 8192, kadm.ScramSha256: 4096}; fmt.Sprint(creds) != fmt.Sprint(want) {
		t.Fatalf("alice's credentials: %v, want %v", creds, want)
	}

	for _, c := range []struct {
		name, listener string
		mech           sasl.Mechanism
	}{
		{"SCRAM-SHA-512 over SASL_SSL", "SASL_SSL", scram512("alice", aliceSha512)},
		{"SCRAM-SHA-256 over SASL_PLAINTEXT", "SASL_PLAINTEXT", scram256("alice", aliceSha256)},
		{"PLAIN over SASL_PLAINTEXT", "SASL_PLAINTEXT", plain.Auth{User: "carol", Pass: carolPlain}.AsMechanism()},
	} {
		t.Run(c.name, func(t *testing.T) {
			topic := "go-sasl-" + strings.ToLower(c.listener) + "-" + strings.Fields(c.name)[0]
			b.roundTrip(t, ctx, c.listener, c.mech, topic)
		})
	}

	t.Run("refused logins", func(t *testing.T) {
		refusedBefore := b.metric(t, "corelog_failed_authentications_total")
		for _, c := range []struct {
			name, listener string
			mech           sasl.Mechanism
			want           error
		}{
			{"SCRAM-SHA-512, wrong password", "SASL_SSL", scram512("alice", "not-"+aliceSha512), kerr.SaslAuthenticationFailed},
			{"SCRAM-SHA-512, unknown user", "SASL_SSL", scram512("mallory", aliceSha512), kerr.SaslAuthenticationFailed},
			{"SCRAM-SHA-512 with the SHA-256 password", "SASL_PLAINTEXT", scram512("alice", aliceSha256), kerr.SaslAuthenticationFailed},
			{"SCRAM-SHA-256, wrong password", "SASL_PLAINTEXT", scram256("alice", aliceSha512), kerr.SaslAuthenticationFailed},
			{"PLAIN, wrong password", "SASL_PLAINTEXT", plain.Auth{User: "carol", Pass: "nope"}.AsMechanism(), kerr.SaslAuthenticationFailed},
			{"SCRAM-SHA-256 where only SCRAM-SHA-512 is enabled", "SASL_SSL", scram256("alice", aliceSha256), kerr.UnsupportedSaslMechanism},
		} {
			cl := b.saslClient(t, c.listener, c.mech, kgo.RetryTimeout(5*time.Second), kgo.DialTimeout(3*time.Second))
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			start := time.Now()
			err := cl.Ping(pctx)
			took := time.Since(start)
			cancel()
			switch {
			case err == nil:
				t.Errorf("%s: the broker answered", c.name)
			case !errors.Is(err, c.want):
				t.Errorf("%s: %v, want %v", c.name, err, c.want)
			case took > 3*time.Second:
				t.Errorf("%s: refused only after %v (retried?): %v", c.name, took, err)
			default:
				t.Logf("%s: refused after %v: %v", c.name, took.Round(time.Millisecond), err)
			}
		}
		// Refusals are for that connection only.
		if err := b.saslClient(t, "SASL_SSL", scram512("alice", aliceSha512)).Ping(ctx); err != nil {
			t.Errorf("alice after the refusals: %v", err)
		}
		// Every refusal is counted; the log has at most a line a second per shard.
		if n := b.metric(t, "corelog_failed_authentications_total") - refusedBefore; n < 6 {
			t.Errorf("corelog_failed_authentications_total rose by %v, want 6", n)
		}
		if lines := b.logLines("authentication failed"); len(lines) == 0 {
			t.Errorf("the broker logged no 'authentication failed' line")
		}
		for _, secret := range []string{aliceSha512, aliceSha256, carolPlain} {
			if lines := b.logLines(secret); len(lines) != 0 {
				t.Errorf("a password in the broker's log: %q", lines)
			}
		}
	})
}

// roundTrip creates topic over listener, checks the metadata names that
// listener, produces 200 records (idempotent, acks=all), consumes them in a
// group and commits.
func (b *saslBroker) roundTrip(t *testing.T, ctx context.Context, listener string, mech sasl.Mechanism, topic string) {
	t.Helper()
	const total = 200
	adm := kadmOf(b.saslClient(t, listener, mech))
	if r, err := adm.CreateTopic(ctx, 2, 1, nil, topic); err != nil || r.Err != nil {
		t.Fatalf("CreateTopic: %v / %v", err, r.Err)
	}
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		t.Fatalf("metadata: %v", err)
	}
	if len(md.Brokers) != 1 || net.JoinHostPort(md.Brokers[0].Host, itoa(int(md.Brokers[0].Port))) != b.listeners[listener] {
		t.Fatalf("metadata names %+v, want the %s listener %s", md.Brokers, listener, b.listeners[listener])
	}

	prod := b.saslClient(t, listener, mech, kgo.DefaultProduceTopic(topic))
	var recs []*kgo.Record
	for i := 0; i < total; i++ {
		v := fmt.Sprintf("%s-%d|%s", topic, i, strings.Repeat("v", i%100))
		if i%50 == 7 {
			v = fmt.Sprintf("%s-%d|%s", topic, i, strings.Repeat("y", 40_000))
		}
		recs = append(recs, &kgo.Record{Key: []byte(itoa(i)), Value: []byte(v)})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	sortByOffset(recs)
	want := map[int32][]string{}
	for _, r := range recs {
		want[r.Partition] = append(want[r.Partition], string(r.Value))
	}

	group := topic + "-group"
	cons := b.saslClient(t, listener, mech, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	got := map[int32][]string{}
	for n := 0; n < total; {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records before the deadline", n, total)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", tp, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			got[r.Partition] = append(got[r.Partition], string(r.Value))
			n++
		})
	}
	if err := cons.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("consumed %v records per partition, want %v (or out of order)", lens(got), lens(want))
	}
	offsets, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatalf("FetchOffsets: %v", err)
	}
	for p, vs := range want {
		if o, ok := offsets.Lookup(topic, p); !ok || o.At != int64(len(vs)) {
			t.Errorf("committed offset of partition %d: %+v (found %v), want %d", p, o, ok, len(vs))
		}
	}
}

func lens(m map[int32][]string) map[int32]int {
	out := map[int32]int{}
	for p, vs := range m {
		out[p] = len(vs)
	}
	return out
}
