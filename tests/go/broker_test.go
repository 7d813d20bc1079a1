// Package gotests drives a real corelog broker process with franz-go (kgo) and
// its admin client (kadm). franz-go checks responses strictly, so these tests
// catch protocol details that more lenient clients let through.
//
// Run: CORELOG_BIN=/path/to/corelog go test -count=1 ./...
// Set CORELOG_KGO_DEBUG=1 to log every request franz-go sends to stderr.
package gotests

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// broker is one corelog process on loopback with its own data directory.
type broker struct {
	t       *testing.T
	addr    string // host:port of the Kafka listener
	port    int32
	httpURL string
	dataDir string
	cmd     *exec.Cmd
	logPath string
	waitErr chan error
	once    sync.Once
	// listeners: host:port of each listener named by startBrokerWithListeners
	// (PLAINTEXT is addr).
	listeners map[string]string
}

// listener is a Kafka listener besides PLAINTEXT: its name (Kafka's listener
// name, e.g. SSL) and security protocol (PLAINTEXT or SSL).
type listener struct{ name, protocol string }

func brokerBin(t *testing.T) string {
	bin := os.Getenv("CORELOG_BIN")
	if bin == "" {
		bin = "../../target/release/corelog"
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		t.Fatalf("CORELOG_BIN %q: %v", bin, err)
	}
	return abs
}

// nextPort counts the ports handed out. They come from below the kernel's ephemeral
// range (32768 and up by default) and never twice: a port the kernel chose for a listen
// on port 0 could be chosen again before the broker bound it, or taken meanwhile as a
// client's source port, and the broker then failed to start.
var nextPort atomic.Uint32

func init() { nextPort.Store(uint32(os.Getpid()%120) * 100) }

func freePort(t *testing.T) int {
	for tries := 0; tries < 12000; tries++ {
		port := 20000 + int(nextPort.Add(1)%12000)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		return port
	}
	t.Fatalf("no free loopback port in 20000-31999")
	return 0
}

// startBroker starts corelog with 2 shards and waits for /health to answer
// "ok". The process is stopped when the test ends; if the test failed, the
// tail of its log is printed.
func startBroker(t *testing.T, extraArgs ...string) *broker {
	t.Helper()
	return startBrokerWithListeners(t, nil, extraArgs...)
}

// startBrokerWithListeners starts corelog like startBroker, with Kafka's
// `listeners` and `listener.security.protocol.map` instead of --listen: a
// PLAINTEXT listener on b.addr and each of extra on a port of its own
// (b.listeners[name]). Their TLS settings go in extraArgs as Kafka's keys
// (--security ssl.keystore.location=...).
func startBrokerWithListeners(t *testing.T, extra []listener, extraArgs ...string) *broker {
	t.Helper()
	bin := brokerBin(t)
	var lastErr error
	// The binary may be being relinked by a concurrent build: retry a few times.
	for attempt := 0; attempt < 5; attempt++ {
		b, err := tryStartBroker(t, bin, extra, extraArgs)
		if err == nil {
			return b
		}
		lastErr = err
		t.Logf("BROKER START FAILED, attempt %d (retrying): %v", attempt+1, err)
		time.Sleep(time.Duration(attempt+1) * 500 * time.Millisecond)
	}
	t.Fatalf("broker did not start: %v", lastErr)
	return nil
}

func tryStartBroker(t *testing.T, bin string, extra []listener, extraArgs []string) (*broker, error) {
	dataDir, err := os.MkdirTemp("", "corelog-go-data-")
	if err != nil {
		return nil, err
	}
	dataDir, _ = filepath.EvalSymlinks(dataDir)
	port := freePort(t)
	httpPort := freePort(t)
	controllerPort := freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	listenerArgs := []string{"--listen", addr, "--advertise", addr}
	listeners := map[string]string{"PLAINTEXT": addr}
	if len(extra) > 0 {
		specs, protocols := []string{"PLAINTEXT://" + addr}, []string{"PLAINTEXT:PLAINTEXT"}
		for _, l := range extra {
			a := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			listeners[l.name] = a
			specs = append(specs, l.name+"://"+a)
			protocols = append(protocols, l.name+":"+l.protocol)
		}
		listenerArgs = []string{"--listeners", strings.Join(specs, ","),
			"--listener-security-protocol-map", strings.Join(protocols, ",")}
	}
	args := append(append([]string{"serve"}, listenerArgs...),
		"--data-dir", dataDir,
		"--shards", "2",
		"--http", fmt.Sprintf("127.0.0.1:%d", httpPort),
		"--controller-listen", fmt.Sprintf("127.0.0.1:%d", controllerPort),
		"--log-level", "info",
		"--group-initial-rebalance-delay-ms", "0",
	)
	args = append(args, extraArgs...)
	logPath := filepath.Join(dataDir, "..", filepath.Base(dataDir)+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		os.RemoveAll(dataDir)
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		os.RemoveAll(dataDir)
		os.Remove(logPath)
		return nil, fmt.Errorf("exec %s: %w", bin, err)
	}
	b := &broker{
		t:         t,
		addr:      addr,
		port:      int32(port),
		httpURL:   fmt.Sprintf("http://127.0.0.1:%d", httpPort),
		dataDir:   dataDir,
		cmd:       cmd,
		logPath:   logPath,
		waitErr:   make(chan error, 1),
		listeners: listeners,
	}
	go func() {
		err := cmd.Wait()
		logFile.Close()
		b.waitErr <- err
	}()

	// A healthy start takes well under a second; corelog itself warns at 10 s.
	deadline := time.Now().Add(15 * time.Second)
	hc := &http.Client{Timeout: time.Second}
	for {
		select {
		case err := <-b.waitErr:
			tail := b.logTail(40)
			os.RemoveAll(dataDir)
			os.Remove(logPath)
			return nil, fmt.Errorf("broker exited before ready (%v); log:\n%s", err, tail)
		default:
		}
		resp, err := hc.Get(b.httpURL + "/health")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && strings.TrimSpace(string(body)) == "ok" {
				break
			}
		}
		if time.Now().After(deadline) {
			b.stop()
			tail := b.logTail(40)
			os.RemoveAll(dataDir)
			os.Remove(logPath)
			return nil, fmt.Errorf("broker not healthy after 15s (start-up hang; it was then stopped); log:\n%s", tail)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(func() {
		b.stop()
		if t.Failed() {
			t.Logf("broker log tail (%s):\n%s", logPath, b.logTail(80))
		}
		os.RemoveAll(dataDir)
		os.Remove(logPath)
	})
	return b, nil
}

// stop sends SIGTERM, then SIGKILL if the broker has not exited after 10 s.
func (b *broker) stop() {
	b.once.Do(func() {
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.waitErr:
		case <-time.After(10 * time.Second):
			_ = b.cmd.Process.Kill()
			<-b.waitErr
		}
	})
}

func (b *broker) logTail(n int) string {
	f, err := os.Open(b.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, ansi.ReplaceAllString(sc.Text(), ""))
		if len(lines) > 4*n {
			lines = lines[len(lines)-n:]
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

// logContains reports the broker log lines containing substr.
func (b *broker) logLines(substr string) []string {
	data, err := os.ReadFile(b.logPath)
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = ansi.ReplaceAllString(l, ""); strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

// metric returns the value of metric name on the broker's /metrics
// (Prometheus text), summed over its label sets (the shards); 0 if absent.
func (b *broker) metric(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(b.httpURL + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: HTTP %d, %v", resp.StatusCode, err)
	}
	sum := 0.0
	for _, l := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(l, name+"{") && !strings.HasPrefix(l, name+" ") {
			continue
		}
		v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", l, err)
		}
		sum += v
	}
	return sum
}

// client returns a kgo client seeded with the broker, closed at test end.
func (b *broker) client(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	base := []kgo.Opt{
		kgo.SeedBrokers(b.addr),
		kgo.RetryTimeout(20 * time.Second),
	}
	if os.Getenv("CORELOG_KGO_DEBUG") != "" {
		base = append(base, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelDebug, func() string {
			return "[" + t.Name() + "] "
		})))
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func (b *broker) admin(t *testing.T, opts ...kgo.Opt) (*kadm.Client, *kgo.Client) {
	cl := b.client(t, opts...)
	return kadm.NewClient(cl), cl
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func itoa(i int) string { return strconv.Itoa(i) }

// rawRequest sends req at version v on a fresh connection, bypassing
// franz-go's ApiVersions gate, and returns the decoded response or why none
// came (for example the broker closing the connection).
func (b *broker) rawRequest(req kmsg.Request, v int16) (kmsg.Response, error) {
	conn, err := net.DialTimeout("tcp", b.addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	req.SetVersion(v)
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("corelog-go-raw")).AppendRequest(nil, req, 1)
	if _, err := conn.Write(frame); err != nil {
		return nil, fmt.Errorf("write: %w", err)
	}
	var size [4]byte
	if _, err := io.ReadFull(conn, size[:]); err != nil {
		return nil, fmt.Errorf("no response (%w)", err)
	}
	n := int(binary.BigEndian.Uint32(size[:]))
	body := make([]byte, n)
	if _, err := io.ReadFull(conn, body); err != nil {
		return nil, fmt.Errorf("short response: %w", err)
	}
	body = body[4:] // correlation id
	resp := req.ResponseKind()
	resp.SetVersion(v)
	if resp.IsFlexible() && req.Key() != 18 {
		body = body[1:] // empty tagged fields of response header v1
	}
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("undecodable response: %w", err)
	}
	return resp, nil
}

// explainMissing reports, for a request franz-go refused to send because the
// broker's ApiVersions lacks it, what the broker does when it is sent anyway
// and what it logged.
func (b *broker) explainMissing(t *testing.T, req kmsg.Request, v int16) {
	t.Helper()
	resp, err := b.rawRequest(req, v)
	name := kmsg.NameForKey(req.Key())
	if err != nil {
		t.Logf("%s (key %d) v%d sent raw: %v", name, req.Key(), v, err)
	} else {
		t.Logf("%s (key %d) v%d sent raw: answered %+v", name, req.Key(), v, resp)
	}
	time.Sleep(100 * time.Millisecond)
	for _, l := range b.logLines(name) {
		t.Logf("broker log: %s", l)
	}
}
