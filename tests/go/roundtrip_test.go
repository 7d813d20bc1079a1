package gotests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

type produced struct {
	key, value []byte
	headers    []kgo.RecordHeader
	ts         time.Time
	partition  int32
	offset     int64
}

// TestProduceConsumeRoundTrip: franz-go's default producer (idempotent,
// acks=all, default compression, sticky key partitioner) writes keyed
// records with headers; a plain consumer reads every one back exactly once
// with key, value, headers, timestamp, partition, offset and producer id intact.
func TestProduceConsumeRoundTrip(t *testing.T) {
	b := startBroker(t)
	const (
		topic      = "go-roundtrip"
		partitions = 5
		total      = 4000
	)
	adm, _ := b.admin(t)
	ctx := testCtx(t, 90*time.Second)
	resp, err := adm.CreateTopic(ctx, partitions, 1, nil, topic)
	if err != nil || resp.Err != nil {
		t.Fatalf("CreateTopic: %v / %v %s", err, resp.Err, resp.ErrMessage)
	}

	prod := b.client(t, kgo.DefaultProduceTopic(topic))
	base := time.UnixMilli(time.Now().Add(-time.Hour).UnixMilli())
	var (
		mu      sync.Mutex
		results = make([]produced, total)
		errs    []error
		wg      sync.WaitGroup
	)
	for i := 0; i < total; i++ {
		r := &kgo.Record{
			Key:       []byte(fmt.Sprintf("key-%05d", i)),
			Value:     bytes.Repeat([]byte(fmt.Sprintf("value-%d|", i)), 1+i%7),
			Headers:   []kgo.RecordHeader{{Key: "seq", Value: []byte(itoa(i))}, {Key: "empty", Value: nil}, {Key: "bin", Value: []byte{0, byte(i), 0xff}}},
			Timestamp: base.Add(time.Duration(i) * time.Millisecond),
		}
		if i%500 == 0 {
			r.Value = nil // null values survive too
		}
		want := produced{key: r.Key, value: r.Value, headers: r.Headers, ts: r.Timestamp}
		idx := i
		wg.Add(1)
		prod.Produce(ctx, r, func(r *kgo.Record, err error) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("record %d: %w", idx, err))
				return
			}
			want.partition, want.offset = r.Partition, r.Offset
			results[idx] = want
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d produce errors, first: %v", len(errs), errs[0])
	}
	pid, epoch, err := prod.ProducerID(ctx)
	if err != nil {
		t.Fatalf("ProducerID: %v", err)
	}
	if pid < 0 || epoch < 0 {
		t.Fatalf("default producer is not idempotent: producer id %d epoch %d", pid, epoch)
	}

	// Offsets handed out per partition are exactly 0..n-1.
	byPart := map[int32][]int64{}
	index := map[[2]int64]int{}
	for i, r := range results {
		byPart[r.partition] = append(byPart[r.partition], r.offset)
		index[[2]int64{int64(r.partition), r.offset}] = i
	}
	if len(byPart) < 3 {
		t.Fatalf("records landed on %d partitions, want at least 3 of %d", len(byPart), partitions)
	}
	for p, offs := range byPart {
		sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
		for i, o := range offs {
			if o != int64(i) {
				t.Fatalf("partition %d: produce offsets not dense: position %d has offset %d", p, i, o)
			}
		}
	}

	// End offsets equal the per-partition counts.
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("ListEndOffsets: %v", err)
	}
	for p := int32(0); p < partitions; p++ {
		lo, ok := ends.Lookup(topic, p)
		if !ok || lo.Err != nil || lo.Offset != int64(len(byPart[p])) {
			t.Errorf("end offset of partition %d = %+v, want %d", p, lo, len(byPart[p]))
		}
	}

	cons := b.client(t,
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(500*time.Millisecond),
	)
	seen := make([]bool, total)
	got := 0
	for got < total {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("timed out after consuming %d of %d records", got, total)
		}
		fs.EachError(func(tp string, p int32, err error) {
			t.Errorf("fetch error %s/%d: %v", tp, p, err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			i, ok := index[[2]int64{int64(r.Partition), r.Offset}]
			if !ok {
				t.Errorf("unexpected record %d/%d", r.Partition, r.Offset)
				return
			}
			if seen[i] {
				t.Errorf("record %d (%d/%d) consumed twice", i, r.Partition, r.Offset)
				return
			}
			seen[i] = true
			got++
			checkRecord(t, i, results[i], r, pid, epoch)
		})
		if t.Failed() {
			t.FailNow()
		}
	}
	// Nothing beyond: a further poll returns no records.
	pctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	fs := cons.PollFetches(pctx)
	extra := 0
	fs.EachRecord(func(*kgo.Record) { extra++ })
	for _, fe := range fs.Errors() {
		if !errors.Is(fe.Err, context.DeadlineExceeded) {
			t.Errorf("fetch error after the last record: %s/%d %v", fe.Topic, fe.Partition, fe.Err)
		}
	}
	if extra != 0 {
		t.Errorf("%d records beyond the %d produced", extra, total)
	}
}

func checkRecord(t *testing.T, i int, want produced, r *kgo.Record, pid int64, epoch int16) {
	t.Helper()
	if !bytes.Equal(r.Key, want.key) {
		t.Errorf("record %d key %q want %q", i, r.Key, want.key)
	}
	if !bytes.Equal(r.Value, want.value) || (r.Value == nil) != (want.value == nil) {
		t.Errorf("record %d value %q (nil=%v) want %q (nil=%v)", i, r.Value, r.Value == nil, want.value, want.value == nil)
	}
	if !r.Timestamp.Equal(want.ts) {
		t.Errorf("record %d timestamp %v want %v", i, r.Timestamp, want.ts)
	}
	if r.Attrs.TimestampType() != 0 {
		t.Errorf("record %d timestamp type %d want 0 (CreateTime)", i, r.Attrs.TimestampType())
	}
	if len(r.Headers) != len(want.headers) {
		t.Errorf("record %d has %d headers want %d", i, len(r.Headers), len(want.headers))
	} else {
		for h := range r.Headers {
			if r.Headers[h].Key != want.headers[h].Key || !bytes.Equal(r.Headers[h].Value, want.headers[h].Value) {
				t.Errorf("record %d header %d = %q:%q want %q:%q", i, h, r.Headers[h].Key, r.Headers[h].Value, want.headers[h].Key, want.headers[h].Value)
			}
		}
	}
	if r.ProducerID != pid || r.ProducerEpoch != epoch {
		t.Errorf("record %d producer %d/%d want %d/%d", i, r.ProducerID, r.ProducerEpoch, pid, epoch)
	}
	if r.Attrs.IsTransactional() || r.Attrs.IsControl() {
		t.Errorf("record %d attrs %v: transactional/control", i, r.Attrs)
	}
}
