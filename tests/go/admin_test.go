package gotests

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Kafka's answers without an authorizer: every operation the resource type
// supports (AclEntry.supportedOperations, Kafka 4.x), as a bit field.
var (
	topicOps = []kadm.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationWrite, kmsg.ACLOperationCreate,
		kmsg.ACLOperationDelete, kmsg.ACLOperationAlter, kmsg.ACLOperationDescribe,
		kmsg.ACLOperationDescribeConfigs, kmsg.ACLOperationAlterConfigs}
	// Kafka 3.8+ (KIP-848 group configs) adds DESCRIBE_CONFIGS and ALTER_CONFIGS to GROUP.
	groupOps = []kadm.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationDelete, kmsg.ACLOperationDescribe,
		kmsg.ACLOperationDescribeConfigs, kmsg.ACLOperationAlterConfigs}
	clusterOps = int32(1<<kmsg.ACLOperationCreate | 1<<kmsg.ACLOperationAlter | 1<<kmsg.ACLOperationDescribe |
		1<<kmsg.ACLOperationClusterAction | 1<<kmsg.ACLOperationDescribeConfigs |
		1<<kmsg.ACLOperationAlterConfigs | 1<<kmsg.ACLOperationIdempotentWrite) // 8096
)

func configMap(rc kadm.ResourceConfig) map[string]kadm.Config {
	m := map[string]kadm.Config{}
	for _, c := range rc.Configs {
		m[c.Key] = c
	}
	return m
}

func wantConfig(t *testing.T, cfgs map[string]kadm.Config, key, value string, source kmsg.ConfigSource) {
	t.Helper()
	c, ok := cfgs[key]
	if !ok {
		t.Errorf("config %s missing", key)
		return
	}
	if c.Value == nil || *c.Value != value || c.Source != source {
		t.Errorf("config %s = %v (source %v), want %q (source %v)", key, strp(c.Value), c.Source, value, source)
	}
}

func strp(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%q", *s)
}

func isErr(err, want error) bool { return errors.Is(err, want) }

// TestAdmin drives a broad set of kadm admin calls against one broker and
// checks the exact values Kafka would answer.
func TestAdmin(t *testing.T) {
	b := startBroker(t)
	adm, cl := b.admin(t)
	ctx := testCtx(t, 110*time.Second)

	const (
		ta = "go-admin-a" // 3 partitions, retention.ms override; data in 0 and 1
		tb = "go-admin-b" // 1 partition, grown to 3
	)
	created, err := adm.CreateTopics(ctx, 3, 1, map[string]*string{"retention.ms": kadm.StringPtr("3600000")}, ta)
	if err != nil {
		t.Fatalf("CreateTopics: %v", err)
	}
	createdB, err := adm.CreateTopics(ctx, 1, 1, nil, tb)
	if err != nil {
		t.Fatalf("CreateTopics: %v", err)
	}
	if created[ta].Err != nil || createdB[tb].Err != nil {
		t.Fatalf("CreateTopics errors: %v %s / %v %s", created[ta].Err, created[ta].ErrMessage, createdB[tb].Err, createdB[tb].ErrMessage)
	}
	ids := map[string]kadm.TopicID{ta: created[ta].ID, tb: createdB[tb].ID}

	t.Run("CreateTopics", func(t *testing.T) {
		r := created[ta]
		if r.Topic != ta || r.NumPartitions != 3 || r.ReplicationFactor != 1 {
			t.Errorf("CreateTopics response %+v, want 3 partitions rf 1", r)
		}
		if r.ID == (kadm.TopicID{}) || ids[ta] == ids[tb] {
			t.Errorf("topic ids %v %v: want distinct non-zero", ids[ta], ids[tb])
		}
		wantConfig(t, r.Configs, "retention.ms", "3600000", kmsg.ConfigSourceDynamicTopicConfig)
		wantConfig(t, r.Configs, "cleanup.policy", "delete", kmsg.ConfigSourceDefaultConfig)
		wantConfig(t, r.Configs, "max.message.bytes", "1048588", kmsg.ConfigSourceDefaultConfig)

		again, err := adm.CreateTopics(ctx, 3, 1, nil, ta)
		if err != nil || !isErr(again[ta].Err, kerr.TopicAlreadyExists) {
			t.Errorf("re-create: %v / %v, want TOPIC_ALREADY_EXISTS", err, again[ta].Err)
		}
		rf2, err := adm.CreateTopics(ctx, 1, 2, nil, "go-admin-rf2")
		if err != nil || !isErr(rf2["go-admin-rf2"].Err, kerr.InvalidReplicationFactor) {
			t.Errorf("rf 2 on one broker: %v / %v, want INVALID_REPLICATION_FACTOR", err, rf2["go-admin-rf2"].Err)
		}
		p0, err := adm.CreateTopics(ctx, 0, 1, nil, "go-admin-p0")
		if err != nil || !isErr(p0["go-admin-p0"].Err, kerr.InvalidPartitions) {
			t.Errorf("0 partitions: %v / %v, want INVALID_PARTITIONS", err, p0["go-admin-p0"].Err)
		}
		bad, err := adm.CreateTopics(ctx, 1, 1, nil, "go/admin/bad")
		if err != nil || !isErr(bad["go/admin/bad"].Err, kerr.InvalidTopicException) {
			t.Errorf("bad name: %v / %v, want INVALID_TOPIC_EXCEPTION", err, bad["go/admin/bad"].Err)
		}
		badCfg, err := adm.CreateTopics(ctx, 1, 1, map[string]*string{"retention.ms": kadm.StringPtr("soon")}, "go-admin-badcfg")
		if err != nil || !isErr(badCfg["go-admin-badcfg"].Err, kerr.InvalidConfig) {
			t.Errorf("bad config: %v / %v, want INVALID_CONFIG", err, badCfg["go-admin-badcfg"].Err)
		}
		dry, err := adm.ValidateCreateTopics(ctx, 2, 1, nil, "go-admin-dry")
		if err != nil || dry["go-admin-dry"].Err != nil || dry["go-admin-dry"].NumPartitions != 2 {
			t.Errorf("validate-only create: %v / %+v", err, dry["go-admin-dry"])
		}
		all, err := adm.ListTopics(ctx)
		if err != nil {
			t.Fatalf("ListTopics: %v", err)
		}
		if names := all.Names(); !reflect.DeepEqual(names, []string{ta, tb}) {
			t.Errorf("topics after the failed and validate-only creates: %v, want [%s %s]", names, ta, tb)
		}
	})

	var meta kadm.Metadata
	t.Run("ListTopicsMetadata", func(t *testing.T) {
		tds, err := adm.ListTopics(ctx)
		if err != nil {
			t.Fatalf("ListTopics: %v", err)
		}
		for _, name := range []string{ta, tb} {
			td, ok := tds[name]
			if !ok {
				t.Fatalf("ListTopics lacks %s: %v", name, tds.Names())
			}
			if td.Err != nil || td.IsInternal || td.ID != ids[name] {
				t.Errorf("%s: err %v internal %v id %v (created %v)", name, td.Err, td.IsInternal, td.ID, ids[name])
			}
			if len(td.AuthorizedOperations) != 0 {
				t.Errorf("%s: authorized operations %v without asking for them", name, td.AuthorizedOperations)
			}
		}
		if n := len(tds[ta].Partitions); n != 3 {
			t.Errorf("%s has %d partitions, want 3", ta, n)
		}
		for p, pd := range tds[ta].Partitions {
			if pd.Err != nil || pd.Leader != 0 || pd.LeaderEpoch < 0 || !reflect.DeepEqual(pd.Replicas, []int32{0}) ||
				!reflect.DeepEqual(pd.ISR, []int32{0}) || len(pd.OfflineReplicas) != 0 {
				t.Errorf("%s/%d: %+v, want leader 0 replicas [0] isr [0]", ta, p, pd)
			}
		}
		meta, err = adm.Metadata(ctx, ta)
		if err != nil {
			t.Fatalf("Metadata(%s): %v", ta, err)
		}
		if len(meta.Topics) != 1 || meta.Topics[ta].ID != ids[ta] {
			t.Errorf("Metadata(%s) topics %v", ta, meta.Topics.Names())
		}
		if meta.Cluster == "" || meta.Controller != 0 {
			t.Errorf("cluster id %q controller %d, want non-empty and 0", meta.Cluster, meta.Controller)
		}
	})

	t.Run("TopicAuthorizedOperations", func(t *testing.T) {
		tds, err := adm.ListTopics(kadm.WithAuthorizedOps(ctx), ta)
		if err != nil {
			t.Fatalf("ListTopics with authorized ops: %v", err)
		}
		if got := tds[ta].AuthorizedOperations; !reflect.DeepEqual(got, topicOps) {
			t.Errorf("topic authorized operations %v, want %v (Kafka without an authorizer: every topic operation, bit field 3576)", got, topicOps)
		}
		// The raw field, for the record.
		req := kmsg.NewPtrMetadataRequest()
		req.IncludeTopicAuthorizedOperations = true
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(ta)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil || len(resp.Topics) != 1 {
			t.Fatalf("Metadata: %v", err)
		}
		if resp.Topics[0].AuthorizedOperations != 3576 {
			t.Errorf("Metadata v%d with IncludeTopicAuthorizedOperations: topic authorized operations %d, want 3576", resp.Version, resp.Topics[0].AuthorizedOperations)
		}
	})

	t.Run("BrokerMetadata", func(t *testing.T) {
		m, err := adm.BrokerMetadata(ctx)
		if err != nil {
			t.Fatalf("BrokerMetadata: %v", err)
		}
		want := kadm.BrokerDetails{{NodeID: 0, Host: "127.0.0.1", Port: b.port}}
		if !reflect.DeepEqual(m.Brokers, want) || len(m.Topics) != 0 || m.Controller != 0 || m.Cluster == "" {
			t.Errorf("BrokerMetadata brokers %+v topics %d controller %d cluster %q; want %+v, no topics, controller 0",
				m.Brokers, len(m.Topics), m.Controller, m.Cluster, want)
		}
		// The raw-request helper used to probe missing APIs, checked on a known one.
		raw, err := b.rawRequest(&kmsg.MetadataRequest{Topics: []kmsg.MetadataRequestTopic{}}, 12)
		if err != nil {
			t.Errorf("raw Metadata v12: %v", err)
		} else if mr := raw.(*kmsg.MetadataResponse); len(mr.Brokers) != 1 || mr.Brokers[0].Port != b.port || strp(mr.ClusterID) != fmt.Sprintf("%q", m.Cluster) {
			t.Errorf("raw Metadata v12: %+v", mr)
		}
		bs, err := adm.ListBrokers(ctx)
		if err != nil || !reflect.DeepEqual(bs, want) {
			t.Errorf("ListBrokers %+v %v", bs, err)
		}
		fc := adm.FindGroupCoordinators(ctx, "go-admin-g")
		if r := fc["go-admin-g"]; r.Err != nil || r.NodeID != 0 || r.Host != "127.0.0.1" || r.Port != b.port {
			t.Errorf("FindGroupCoordinators: %+v", r)
		}
		vs, err := adm.ApiVersions(ctx)
		if err != nil || vs[0].Err != nil {
			t.Fatalf("ApiVersions: %v / %v", err, vs[0].Err)
		}
		var keys []string
		v0 := vs[0]
		v0.EachKeySorted(func(k, mn, mx int16) { keys = append(keys, fmt.Sprintf("%s(%d):%d-%d", kmsg.NameForKey(k), k, mn, mx)) })
		t.Logf("broker ApiVersions: %s", strings.Join(keys, " "))
	})

	t.Run("DescribeCluster", func(t *testing.T) {
		req := kmsg.NewPtrDescribeClusterRequest()
		req.IncludeClusterAuthorizedOperations = true
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			b.explainMissing(t, kmsg.NewPtrDescribeClusterRequest(), 0)
			t.Fatalf("DescribeCluster (key 60): %v", err)
		}
		if resp.ErrorCode != 0 {
			t.Fatalf("DescribeCluster error %v %s", kerr.ErrorForCode(resp.ErrorCode), strp(resp.ErrorMessage))
		}
		wantBrokers := []kmsg.DescribeClusterResponseBroker{{NodeID: 0, Host: "127.0.0.1", Port: b.port}}
		if resp.ClusterID != meta.Cluster || resp.ControllerID != 0 || !reflect.DeepEqual(resp.Brokers, wantBrokers) {
			t.Errorf("DescribeCluster v%d: cluster %q (metadata says %q) controller %d brokers %+v", resp.Version, resp.ClusterID, meta.Cluster, resp.ControllerID, resp.Brokers)
		}
		if resp.Version >= 1 && resp.EndpointType != 1 {
			t.Errorf("endpoint type %d, want 1 (brokers)", resp.EndpointType)
		}
		if resp.ClusterAuthorizedOperations != clusterOps {
			t.Errorf("cluster authorized operations %d (%v), want %d (%v)", resp.ClusterAuthorizedOperations,
				kadm.DecodeACLOperations(resp.ClusterAuthorizedOperations), clusterOps, kadm.DecodeACLOperations(clusterOps))
		}
		req.IncludeClusterAuthorizedOperations = false
		resp, err = req.RequestWith(ctx, cl)
		if err == nil && resp.ClusterAuthorizedOperations != math.MinInt32 {
			t.Errorf("cluster authorized operations not asked for: %d, want %d", resp.ClusterAuthorizedOperations, math.MinInt32)
		}
	})

	t.Run("DescribeTopicConfigs", func(t *testing.T) {
		rcs, err := adm.DescribeTopicConfigs(ctx, ta)
		if err != nil {
			t.Fatalf("DescribeTopicConfigs: %v", err)
		}
		if len(rcs) != 1 || rcs[0].Name != ta || rcs[0].Err != nil {
			t.Fatalf("DescribeTopicConfigs: %+v", rcs)
		}
		cfgs := configMap(rcs[0])
		wantConfig(t, cfgs, "retention.ms", "3600000", kmsg.ConfigSourceDynamicTopicConfig)
		wantConfig(t, cfgs, "cleanup.policy", "delete", kmsg.ConfigSourceDefaultConfig)
		wantConfig(t, cfgs, "max.message.bytes", "1048588", kmsg.ConfigSourceDefaultConfig)
		wantConfig(t, cfgs, "segment.bytes", "1073741824", kmsg.ConfigSourceDefaultConfig)
		wantConfig(t, cfgs, "min.insync.replicas", "1", kmsg.ConfigSourceDefaultConfig)
		if s := cfgs["retention.ms"].Synonyms; len(s) == 0 || s[0].Key != "retention.ms" || strp(s[0].Value) != `"3600000"` || s[0].Source != kmsg.ConfigSourceDynamicTopicConfig {
			t.Errorf("retention.ms synonyms %+v: the first must be the topic override itself", s)
		}
		unknown, err := adm.DescribeTopicConfigs(ctx, "go-admin-none")
		if err != nil || len(unknown) != 1 || !isErr(unknown[0].Err, kerr.UnknownTopicOrPartition) {
			t.Errorf("unknown topic: %v / %+v, want UNKNOWN_TOPIC_OR_PARTITION", err, unknown)
		}
	})

	t.Run("AlterTopicConfigs", func(t *testing.T) {
		describe := func() map[string]kadm.Config {
			rcs, err := adm.DescribeTopicConfigs(ctx, ta)
			if err != nil || len(rcs) != 1 {
				t.Fatalf("DescribeTopicConfigs: %v %+v", err, rcs)
			}
			return configMap(rcs[0])
		}
		alter := func(want error, cs ...kadm.AlterConfig) {
			t.Helper()
			rs, err := adm.AlterTopicConfigs(ctx, cs, ta)
			if err != nil {
				t.Fatalf("AlterTopicConfigs: %v", err)
			}
			if len(rs) != 1 || rs[0].Name != ta {
				t.Fatalf("AlterTopicConfigs responses %+v", rs)
			}
			if (want == nil && rs[0].Err != nil) || (want != nil && !isErr(rs[0].Err, want)) {
				t.Errorf("AlterTopicConfigs %+v: %v %s, want %v", cs, rs[0].Err, rs[0].ErrMessage, want)
			}
		}
		alter(nil,
			kadm.AlterConfig{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("7200000")},
			kadm.AlterConfig{Op: kadm.SetConfig, Name: "cleanup.policy", Value: kadm.StringPtr("compact")})
		c := describe()
		wantConfig(t, c, "retention.ms", "7200000", kmsg.ConfigSourceDynamicTopicConfig)
		wantConfig(t, c, "cleanup.policy", "compact", kmsg.ConfigSourceDynamicTopicConfig)

		alter(nil, kadm.AlterConfig{Op: kadm.AppendConfig, Name: "cleanup.policy", Value: kadm.StringPtr("delete")})
		wantConfig(t, describe(), "cleanup.policy", "compact,delete", kmsg.ConfigSourceDynamicTopicConfig)
		alter(nil, kadm.AlterConfig{Op: kadm.SubtractConfig, Name: "cleanup.policy", Value: kadm.StringPtr("compact")})
		wantConfig(t, describe(), "cleanup.policy", "delete", kmsg.ConfigSourceDynamicTopicConfig)

		alter(nil, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: "retention.ms"},
			kadm.AlterConfig{Op: kadm.DeleteConfig, Name: "cleanup.policy"})
		c = describe()
		wantConfig(t, c, "retention.ms", "604800000", kmsg.ConfigSourceDefaultConfig)
		wantConfig(t, c, "cleanup.policy", "delete", kmsg.ConfigSourceDefaultConfig)

		// Invalid alterations change nothing.
		alter(nil, kadm.AlterConfig{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("3600000")})
		alter(kerr.InvalidConfig, kadm.AlterConfig{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("abc")})
		alter(kerr.InvalidConfig, kadm.AlterConfig{Op: kadm.SetConfig, Name: "no.such.config", Value: kadm.StringPtr("1")})
		alter(kerr.InvalidConfig,
			kadm.AlterConfig{Op: kadm.SetConfig, Name: "segment.ms", Value: kadm.StringPtr("1000")},
			kadm.AlterConfig{Op: kadm.AppendConfig, Name: "retention.ms", Value: kadm.StringPtr("1")}) // append on a non-list
		c = describe()
		wantConfig(t, c, "retention.ms", "3600000", kmsg.ConfigSourceDynamicTopicConfig)
		wantConfig(t, c, "segment.ms", "604800000", kmsg.ConfigSourceDefaultConfig)

		vr, err := adm.ValidateAlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("1000")}}, ta)
		if err != nil || len(vr) != 1 || vr[0].Err != nil {
			t.Errorf("validate-only alter: %v %+v", err, vr)
		}
		wantConfig(t, describe(), "retention.ms", "3600000", kmsg.ConfigSourceDynamicTopicConfig)
	})

	t.Run("CreatePartitions", func(t *testing.T) {
		rs, err := adm.CreatePartitions(ctx, 2, tb)
		if err != nil || rs[tb].Err != nil {
			t.Fatalf("CreatePartitions +2: %v / %v %s", err, rs[tb].Err, rs[tb].ErrMessage)
		}
		m, err := adm.Metadata(ctx, tb)
		if err != nil {
			t.Fatalf("Metadata: %v", err)
		}
		if ps := m.Topics[tb].Partitions.Numbers(); !reflect.DeepEqual(ps, []int32{0, 1, 2}) {
			t.Errorf("%s partitions after +2: %v, want [0 1 2]", tb, ps)
		}
		for p, pd := range m.Topics[tb].Partitions {
			if pd.Err != nil || pd.Leader != 0 {
				t.Errorf("%s/%d: %+v", tb, p, pd)
			}
		}
		down, err := adm.UpdatePartitions(ctx, 2, ta)
		if err != nil || !isErr(down[ta].Err, kerr.InvalidPartitions) {
			t.Errorf("shrink 3 -> 2: %v / %v, want INVALID_PARTITIONS", err, down[ta].Err)
		}
		none, err := adm.CreatePartitions(ctx, 1, "go-admin-none")
		if err != nil || !isErr(none["go-admin-none"].Err, kerr.UnknownTopicOrPartition) {
			t.Errorf("unknown topic: %v / %v, want UNKNOWN_TOPIC_OR_PARTITION", err, none["go-admin-none"].Err)
		}
	})

	// Data: partition 0 gets 10 records, 1 gets 20, 2 none, from the default
	// (idempotent) producer, in two produce calls each so that the last batch
	// of each partition holds exactly its last record. Record i of a partition
	// has timestamp base+i s, except record 5 of partition 1: base+100 s.
	base := time.Now().Add(-time.Hour).Truncate(time.Second).UnixMilli()
	tsOf := func(p int32, i int) int64 {
		if p == 1 && i == 5 {
			return base + 100000
		}
		return base + int64(i)*1000
	}
	counts := map[int32]int{0: 10, 1: 20, 2: 0}
	prod := b.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var first, last []*kgo.Record
	for p := int32(0); p < 3; p++ {
		for i := 0; i < counts[p]; i++ {
			r := &kgo.Record{Topic: ta, Partition: p, Key: []byte(fmt.Sprintf("p%d-%d", p, i)), Value: []byte("v"), Timestamp: time.UnixMilli(tsOf(p, i))}
			if i == counts[p]-1 {
				last = append(last, r)
			} else {
				first = append(first, r)
			}
		}
	}
	if err := prod.ProduceSync(ctx, first...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	if err := prod.ProduceSync(ctx, last...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	pid, epoch, err := prod.ProducerID(ctx)
	if err != nil {
		t.Fatalf("ProducerID: %v", err)
	}
	layout := map[int32]string{0: batchLayout(t, ctx, cl, ta, 0), 1: batchLayout(t, ctx, cl, ta, 1)}
	epochOf := func(p int32) int32 { return meta.Topics[ta].Partitions[p].LeaderEpoch }

	checkListed := func(t *testing.T, what string, lo kadm.ListedOffsets, want map[int32][2]int64) {
		t.Helper()
		for p := int32(0); p < 3; p++ {
			got, ok := lo.Lookup(ta, p)
			if !ok {
				t.Errorf("%s: no answer for partition %d", what, p)
				continue
			}
			w := want[p]
			if got.Err != nil || got.Offset != w[0] || got.Timestamp != w[1] {
				t.Errorf("%s partition %d: offset %d timestamp %d err %v; want offset %d timestamp %d (batches: %s)", what, p, got.Offset, got.Timestamp, got.Err, w[0], w[1], layout[p])
			}
			if got.Err == nil && got.Offset >= 0 && got.LeaderEpoch != epochOf(p) {
				t.Errorf("%s partition %d: leader epoch %d, want %d", what, p, got.LeaderEpoch, epochOf(p))
			}
		}
	}

	t.Run("ListOffsets", func(t *testing.T) {
		lo, err := adm.ListStartOffsets(ctx, ta)
		if err != nil {
			t.Fatalf("ListStartOffsets: %v", err)
		}
		checkListed(t, "start", lo, map[int32][2]int64{0: {0, -1}, 1: {0, -1}, 2: {0, -1}})
		lo, err = adm.ListEndOffsets(ctx, ta)
		if err != nil {
			t.Fatalf("ListEndOffsets: %v", err)
		}
		checkListed(t, "end", lo, map[int32][2]int64{0: {10, -1}, 1: {20, -1}, 2: {0, -1}})
		lo, err = adm.ListCommittedOffsets(ctx, ta)
		if err != nil {
			t.Fatalf("ListCommittedOffsets: %v", err)
		}
		checkListed(t, "committed (read_committed latest)", lo, map[int32][2]int64{0: {10, -1}, 1: {20, -1}, 2: {0, -1}})
		lo, err = adm.ListOffsetsAfterMilli(ctx, base+3500, ta)
		if err != nil {
			t.Fatalf("ListOffsetsAfterMilli: %v", err)
		}
		checkListed(t, "after base+3.5s", lo, map[int32][2]int64{0: {4, base + 4000}, 1: {4, base + 4000}, 2: {0, -1}})
		// Partition 0 has nothing at or after base+9.5 s (kadm falls back to
		// the end offset); partition 1's earliest such record is offset 5.
		lo, err = adm.ListOffsetsAfterMilli(ctx, base+9500, ta)
		if err != nil {
			t.Fatalf("ListOffsetsAfterMilli: %v", err)
		}
		checkListed(t, "after base+9.5s", lo, map[int32][2]int64{0: {10, -1}, 1: {5, base + 100000}, 2: {0, -1}})
		lo, err = adm.ListOffsetsAfterMilli(ctx, base, ta)
		if err != nil {
			t.Fatalf("ListOffsetsAfterMilli: %v", err)
		}
		checkListed(t, "after base", lo, map[int32][2]int64{0: {0, base}, 1: {0, base}, 2: {0, -1}})
	})

	t.Run("ListMaxTimestampOffsets", func(t *testing.T) {
		lo, err := adm.ListMaxTimestampOffsets(ctx, ta)
		if err != nil {
			t.Fatalf("ListMaxTimestampOffsets: %v", err)
		}
		checkListed(t, "max timestamp", lo, map[int32][2]int64{0: {9, base + 9000}, 1: {5, base + 100000}, 2: {-1, -1}})
	})

	t.Run("DescribeProducers", func(t *testing.T) {
		ts := kadm.TopicsSet{}
		ts.Add(ta, 0, 1, 2)
		dp, err := adm.DescribeProducers(ctx, ts)
		if err != nil {
			raw := kmsg.NewPtrDescribeProducersRequest()
			rt := kmsg.NewDescribeProducersRequestTopic()
			rt.Topic, rt.Partitions = ta, []int32{0}
			raw.Topics = append(raw.Topics, rt)
			b.explainMissing(t, raw, 0)
			t.Fatalf("DescribeProducers: %v", err)
		}
		for p := int32(0); p < 3; p++ {
			part, ok := dp[ta].Partitions[p]
			if !ok {
				t.Errorf("partition %d missing", p)
				continue
			}
			if part.Err != nil {
				t.Errorf("partition %d: %v %s", p, part.Err, part.ErrMessage)
				continue
			}
			if counts[p] == 0 {
				if len(part.ActiveProducers) != 0 {
					t.Errorf("empty partition %d has producers %+v", p, part.ActiveProducers)
				}
				continue
			}
			want := kadm.DescribedProducer{
				Leader: 0, Topic: ta, Partition: p, ProducerID: pid, ProducerEpoch: epoch,
				LastSequence: int32(counts[p] - 1), LastTimestamp: tsOf(p, counts[p]-1),
				CoordinatorEpoch: -1, CurrentTxnStartOffset: -1,
			}
			if got := part.ActiveProducers; len(got) != 1 || got[pid] != want {
				t.Errorf("partition %d producers %+v, want exactly %+v", p, got, want)
			}
		}
	})

	// Raw fetch of a whole partition: the bytes of its record batches.
	batchBytes := func(p int32) int64 {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID = -1
		req.MaxWaitMillis = 0
		req.MinBytes = 1
		req.MaxBytes = 16 << 20
		req.SessionEpoch = -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = ta
		rt.TopicID = ids[ta] // Fetch v13+ names topics by id only
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = p
		rp.FetchOffset = 0
		rp.PartitionMaxBytes = 16 << 20
		rp.CurrentLeaderEpoch = -1
		rp.LogStartOffset = -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 || resp.Topics[0].Partitions[0].ErrorCode != 0 {
			t.Fatalf("raw fetch %s/%d: %v %+v", ta, p, err, resp)
		}
		return int64(len(resp.Topics[0].Partitions[0].RecordBatches))
	}

	t.Run("DescribeLogDirs", func(t *testing.T) {
		ts := kadm.TopicsSet{}
		ts.Add(ta, 0, 1, 2)
		all, err := adm.DescribeAllLogDirs(ctx, ts)
		if err != nil {
			b.explainMissing(t, kmsg.NewPtrDescribeLogDirsRequest(), 1)
			t.Fatalf("DescribeAllLogDirs: %v", err)
		}
		dirs, ok := all[0]
		if !ok || len(all) != 1 || len(dirs) != 1 {
			t.Fatalf("DescribeAllLogDirs: %+v, want one broker (0) with one directory", all)
		}
		d, ok := dirs[b.dataDir]
		if !ok {
			t.Fatalf("log dirs %+v, want %s", dirs, b.dataDir)
		}
		if d.Err != nil || d.Broker != 0 {
			t.Errorf("log dir %s: %+v", b.dataDir, d)
		}
		var st syscall.Statfs_t
		if err := syscall.Statfs(b.dataDir, &st); err != nil {
			t.Fatalf("statfs: %v", err)
		}
		total, avail := int64(st.Blocks)*st.Frsize, int64(st.Bavail)*st.Frsize
		if d.TotalBytes != total || d.UsableBytes <= 0 || d.UsableBytes > total || math.Abs(float64(d.UsableBytes-avail)) > 256<<20 {
			t.Errorf("total/usable bytes %d/%d, statfs says %d/%d", d.TotalBytes, d.UsableBytes, total, avail)
		}
		if got := d.Topics[ta]; len(got) != 3 || len(d.Topics) != 1 {
			t.Errorf("described partitions %+v, want %s 0..2 only", d.Topics, ta)
		}
		for p := int32(0); p < 3; p++ {
			dp, ok := d.Topics.Lookup(ta, p)
			if !ok {
				continue
			}
			want := kadm.DescribedLogDirPartition{Broker: 0, Dir: b.dataDir, Topic: ta, Partition: p, Size: batchBytes(p)}
			if dp != want {
				t.Errorf("partition %d: %+v, want %+v", p, dp, want)
			}
		}
		every, err := adm.DescribeAllLogDirs(ctx, nil)
		if err != nil {
			t.Fatalf("DescribeAllLogDirs(all): %v", err)
		}
		for _, tp := range []struct {
			t string
			p int32
		}{{ta, 0}, {ta, 2}, {tb, 0}, {tb, 2}} {
			if _, ok := every[0][b.dataDir].Topics.Lookup(tp.t, tp.p); !ok {
				t.Errorf("DescribeAllLogDirs(all) lacks %s/%d", tp.t, tp.p)
			}
		}
	})

	t.Run("DeleteRecords", func(t *testing.T) {
		os := kadm.Offsets{}
		os.Add(kadm.Offset{Topic: ta, Partition: 0, At: 4})
		os.Add(kadm.Offset{Topic: ta, Partition: 1, At: 20})
		os.Add(kadm.Offset{Topic: ta, Partition: 2, At: -1}) // -1: the high watermark
		rs, err := adm.DeleteRecords(ctx, os)
		if err != nil {
			t.Fatalf("DeleteRecords: %v", err)
		}
		for p, lw := range map[int32]int64{0: 4, 1: 20, 2: 0} {
			r, ok := rs.Lookup(ta, p)
			if !ok || r.Err != nil || r.LowWatermark != lw {
				t.Errorf("DeleteRecords partition %d: %+v, want low watermark %d", p, r, lw)
			}
		}
		lo, err := adm.ListStartOffsets(ctx, ta)
		if err != nil {
			t.Fatalf("ListStartOffsets: %v", err)
		}
		checkListed(t, "start after DeleteRecords", lo, map[int32][2]int64{0: {4, -1}, 1: {20, -1}, 2: {0, -1}})
		beyond := kadm.Offsets{}
		beyond.Add(kadm.Offset{Topic: ta, Partition: 0, At: 11})
		rs, err = adm.DeleteRecords(ctx, beyond)
		if err != nil {
			t.Fatalf("DeleteRecords: %v", err)
		}
		if r, _ := rs.Lookup(ta, 0); !isErr(r.Err, kerr.OffsetOutOfRange) {
			t.Errorf("DeleteRecords beyond the high watermark: %+v, want OFFSET_OUT_OF_RANGE", r)
		}
		// A consumer from the start begins at the new log start offset.
		c := b.client(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{ta: {0: kgo.NewOffset().AtStart()}}))
		fs := c.PollRecords(ctx, 1)
		if recs := fs.Records(); len(recs) == 0 || recs[0].Offset != 4 || string(recs[0].Key) != "p0-4" {
			t.Errorf("first record after DeleteRecords: %+v (errors %v), want offset 4 key p0-4", recs, fs.Errors())
		}
	})

	t.Run("GroupOffsets", func(t *testing.T) {
		const g = "go-admin-g"
		os := kadm.Offsets{}
		os.Add(kadm.Offset{Topic: ta, Partition: 0, At: 7, LeaderEpoch: 0, Metadata: "m0"})
		os.Add(kadm.Offset{Topic: ta, Partition: 1, At: 15, LeaderEpoch: -1, Metadata: "m1"})
		cr, err := adm.CommitOffsets(ctx, g, os)
		if err != nil {
			t.Fatalf("CommitOffsets: %v", err)
		}
		if err := cr.Error(); err != nil {
			t.Errorf("CommitOffsets: %v", err)
		}
		fo, err := adm.FetchOffsets(ctx, g)
		if err != nil {
			t.Fatalf("FetchOffsets: %v", err)
		}
		want := kadm.OffsetResponses{ta: {
			0: {Offset: kadm.Offset{Topic: ta, TopicID: ids[ta], Partition: 0, At: 7, LeaderEpoch: 0, Metadata: "m0"}},
			1: {Offset: kadm.Offset{Topic: ta, TopicID: ids[ta], Partition: 1, At: 15, LeaderEpoch: -1, Metadata: "m1"}},
		}}
		if !reflect.DeepEqual(fo, want) {
			t.Errorf("FetchOffsets = %+v, want %+v", fo, want)
		}
		lg, err := adm.ListGroups(ctx)
		if err != nil {
			t.Fatalf("ListGroups: %v", err)
		}
		if l, ok := lg[g]; !ok || l.State != "Empty" || l.ProtocolType != "" || l.Coordinator != 0 {
			t.Errorf("ListGroups %s: %+v (present %v), want Empty, no protocol type, coordinator 0", g, l, ok)
		}
		if l, ok := lg[g]; ok && l.GroupType != "" && l.GroupType != "classic" {
			t.Errorf("group type %q, want classic", l.GroupType)
		}
		if stable, err := adm.ListGroups(ctx, "Stable"); err != nil || len(stable) != 0 {
			t.Errorf("ListGroups(Stable): %+v %v, want none", stable, err)
		}
		dg, err := adm.DescribeGroups(ctx, g, "go-admin-ghost")
		if err != nil {
			t.Fatalf("DescribeGroups: %v", err)
		}
		if d := dg[g]; d.Err != nil || d.State != "Empty" || d.ProtocolType != "" || d.Protocol != "" || len(d.Members) != 0 {
			t.Errorf("DescribeGroups %s: %+v, want Empty with no members", g, d)
		} else if !reflect.DeepEqual(d.AuthorizedOperations, groupOps) {
			req := kmsg.NewPtrDescribeGroupsRequest()
			req.Groups = []string{g}
			req.IncludeAuthorizedOperations = true
			raw := int32(0)
			resp, err := req.RequestWith(ctx, cl)
			if err == nil && len(resp.Groups) == 1 {
				raw = resp.Groups[0].AuthorizedOperations
			}
			t.Errorf("group authorized operations %v (DescribeGroups v%d IncludeAuthorizedOperations=true: raw %d), want %v (bit field 3400)", d.AuthorizedOperations, resp.Version, raw, groupOps)
		}
		if d := dg["go-admin-ghost"]; d.Err != nil || d.State != "Dead" {
			t.Errorf("DescribeGroups of an unknown group: %+v, want state Dead, no error", d)
		}
		if nf, err := adm.FetchOffsets(ctx, "go-admin-ghost"); err != nil || len(nf) != 0 {
			t.Errorf("FetchOffsets of an unknown group: %+v %v, want nothing", nf, err)
		}
		ts := kadm.TopicsSet{}
		ts.Add(ta, 1)
		do, err := adm.DeleteOffsets(ctx, g, ts)
		if err != nil {
			t.Fatalf("DeleteOffsets: %v", err)
		}
		if e, ok := do.Lookup(ta, 1); !ok || e != nil {
			t.Errorf("DeleteOffsets %s/1: %v (present %v)", ta, e, ok)
		}
		fo, err = adm.FetchOffsets(ctx, g)
		if err != nil {
			t.Fatalf("FetchOffsets: %v", err)
		}
		delete(want[ta], 1)
		if !reflect.DeepEqual(fo, want) {
			t.Errorf("FetchOffsets after DeleteOffsets = %+v, want %+v", fo, want)
		}
		dr, err := adm.DeleteGroups(ctx, g)
		if err != nil || dr[g].Err != nil {
			t.Errorf("DeleteGroups: %v / %v", err, dr[g].Err)
		}
		dr, err = adm.DeleteGroups(ctx, g)
		if err != nil || !isErr(dr[g].Err, kerr.GroupIDNotFound) {
			t.Errorf("DeleteGroups again: %v / %v, want GROUP_ID_NOT_FOUND", err, dr[g].Err)
		}
		if lg, _ := adm.ListGroups(ctx); lg != nil {
			if _, ok := lg[g]; ok {
				t.Errorf("deleted group still listed")
			}
		}
		if fo, err := adm.FetchOffsets(ctx, g); err != nil || len(fo) != 0 {
			t.Errorf("FetchOffsets of the deleted group: %+v %v", fo, err)
		}
	})

	t.Run("LiveGroup", func(t *testing.T) {
		const g = "go-admin-live"
		assigned := make(chan struct{}, 1)
		c, err := kgo.NewClient(kgo.SeedBrokers(b.addr), kgo.ClientID("go-admin-live-client"),
			kgo.ConsumerGroup(g), kgo.ConsumeTopics(tb), kgo.HeartbeatInterval(250*time.Millisecond),
			kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {
				select {
				case assigned <- struct{}{}:
				default:
				}
			}))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		pollCtx, stopPoll := context.WithCancel(ctx)
		polled := make(chan struct{})
		go func() {
			defer close(polled)
			for pollCtx.Err() == nil {
				c.PollFetches(pollCtx)
			}
		}()
		select {
		case <-assigned:
		case <-time.After(30 * time.Second):
			t.Fatalf("no assignment")
		}
		dg, err := adm.DescribeGroups(ctx, g)
		if err != nil {
			t.Fatalf("DescribeGroups: %v", err)
		}
		d := dg[g]
		if d.Err != nil || d.State != "Stable" || d.ProtocolType != "consumer" || d.Protocol != "cooperative-sticky" || len(d.Members) != 1 {
			t.Fatalf("DescribeGroups: %+v, want Stable consumer cooperative-sticky with 1 member", d)
		}
		m := d.Members[0]
		if m.MemberID == "" || m.ClientID != "go-admin-live-client" || m.ClientHost != "/127.0.0.1" || m.InstanceID != nil {
			t.Errorf("member %+v, want client id go-admin-live-client host /127.0.0.1", m)
		}
		if j, ok := m.Join.AsConsumer(); !ok || !reflect.DeepEqual(j.Topics, []string{tb}) {
			t.Errorf("member metadata %+v, want topics [%s]", j, tb)
		}
		if a, ok := m.Assigned.AsConsumer(); !ok || len(a.Topics) != 1 || a.Topics[0].Topic != tb || !reflect.DeepEqual(sorted32(a.Topics[0].Partitions), []int32{0, 1, 2}) {
			t.Errorf("member assignment %+v, want %s [0 1 2]", a, tb)
		}
		lg, err := adm.ListGroups(ctx, "Stable")
		if err != nil {
			t.Fatalf("ListGroups: %v", err)
		}
		if l, ok := lg[g]; !ok || l.ProtocolType != "consumer" || l.State != "Stable" {
			t.Errorf("ListGroups(Stable): %+v", lg)
		}
		dr, err := adm.DeleteGroups(ctx, g)
		if err != nil || !isErr(dr[g].Err, kerr.NonEmptyGroup) {
			t.Errorf("DeleteGroups of a live group: %v / %v, want NON_EMPTY_GROUP", err, dr[g].Err)
		}
		stopPoll()
		<-polled
		c.Close() // LeaveGroup
		dg, err = adm.DescribeGroups(ctx, g)
		if err != nil || dg[g].State != "Empty" || len(dg[g].Members) != 0 || dg[g].ProtocolType != "consumer" {
			t.Errorf("after the member left: %+v %v, want Empty consumer group", dg[g], err)
		}
		dr, err = adm.DeleteGroups(ctx, g)
		if err != nil || dr[g].Err != nil {
			t.Errorf("DeleteGroups after leave: %v / %v", err, dr[g].Err)
		}
	})

	t.Run("ClientQuotas", func(t *testing.T) {
		gopher := kadm.StringPtr("gopher")
		clientEnt := kadm.ClientQuotaEntity{{Type: "client-id", Name: gopher}}
		userDefault := kadm.ClientQuotaEntity{{Type: "user"}}
		ar, err := adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{
			{Entity: clientEnt, Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 1048576}, {Key: "consumer_byte_rate", Value: 2097152}}},
			{Entity: userDefault, Ops: []kadm.AlterClientQuotaOp{{Key: "request_percentage", Value: 50}}},
		})
		if err != nil {
			t.Fatalf("AlterClientQuotas: %v", err)
		}
		for _, r := range ar {
			if r.Err != nil {
				t.Errorf("AlterClientQuotas %v: %v %s", r.Entity, r.Err, r.ErrMessage)
			}
		}
		describe := func(strict bool, comps ...kadm.DescribeClientQuotaComponent) kadm.DescribedClientQuotas {
			t.Helper()
			qs, err := adm.DescribeClientQuotas(ctx, strict, comps)
			if err != nil {
				t.Fatalf("DescribeClientQuotas: %v", err)
			}
			for i := range qs {
				sort.Slice(qs[i].Values, func(a, b int) bool { return qs[i].Values[a].Key < qs[i].Values[b].Key })
			}
			sort.Slice(qs, func(i, j int) bool { return qs[i].Entity.String() < qs[j].Entity.String() })
			return qs
		}
		gopherQuota := kadm.DescribedClientQuota{Entity: clientEnt, Values: kadm.ClientQuotaValues{{Key: "consumer_byte_rate", Value: 2097152}, {Key: "producer_byte_rate", Value: 1048576}}}
		userQuota := kadm.DescribedClientQuota{Entity: kadm.ClientQuotaEntity{{Type: "user", Name: nil}}, Values: kadm.ClientQuotaValues{{Key: "request_percentage", Value: 50}}}
		if got := describe(false, kadm.DescribeClientQuotaComponent{Type: "client-id", MatchName: gopher, MatchType: kmsg.QuotasMatchTypeExact}); !reflect.DeepEqual(got, kadm.DescribedClientQuotas{gopherQuota}) {
			t.Errorf("client-id=gopher: %+v, want %+v", got, gopherQuota)
		}
		if got := describe(true, kadm.DescribeClientQuotaComponent{Type: "user", MatchType: kmsg.QuotasMatchTypeDefault}); !reflect.DeepEqual(got, kadm.DescribedClientQuotas{userQuota}) {
			t.Errorf("default user: %+v, want %+v", got, userQuota)
		}
		if got := describe(false); !reflect.DeepEqual(got, kadm.DescribedClientQuotas{gopherQuota, userQuota}) {
			t.Errorf("all quotas: %+v, want %+v", got, kadm.DescribedClientQuotas{gopherQuota, userQuota})
		}
		if got := describe(false, kadm.DescribeClientQuotaComponent{Type: "client-id", MatchName: kadm.StringPtr("other"), MatchType: kmsg.QuotasMatchTypeExact}); len(got) != 0 {
			t.Errorf("client-id=other: %+v, want none", got)
		}
		bad, err := adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{{Entity: clientEnt, Ops: []kadm.AlterClientQuotaOp{{Key: "bogus_rate", Value: 1}}}})
		if err != nil || len(bad) != 1 || !isErr(bad[0].Err, kerr.InvalidRequest) {
			t.Errorf("unknown quota key: %+v %v, want INVALID_REQUEST", bad, err)
		}
		ar, err = adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{
			{Entity: clientEnt, Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Remove: true}, {Key: "consumer_byte_rate", Remove: true}}},
			{Entity: userDefault, Ops: []kadm.AlterClientQuotaOp{{Key: "request_percentage", Remove: true}}},
		})
		if err != nil || len(ar) != 2 || ar[0].Err != nil || ar[1].Err != nil {
			t.Errorf("remove quotas: %+v %v", ar, err)
		}
		if got := describe(false); len(got) != 0 {
			t.Errorf("quotas after removal: %+v, want none", got)
		}
	})

	t.Run("DescribeBrokerConfigs", func(t *testing.T) {
		rcs, err := adm.DescribeBrokerConfigs(ctx, 0)
		if err != nil {
			t.Fatalf("DescribeBrokerConfigs(0): %v", err)
		}
		if len(rcs) != 1 || rcs[0].Name != "0" || rcs[0].Err != nil {
			t.Fatalf("DescribeBrokerConfigs(0): %+v", rcs)
		}
		c := configMap(rcs[0])
		for k, v := range map[string]string{
			"broker.id": "0", "node.id": "0", "log.dirs": b.dataDir, "num.partitions": "1",
			"advertised.listeners": "PLAINTEXT://" + b.addr, "auto.create.topics.enable": "true",
			"message.max.bytes": "1048588", "offsets.topic.num.partitions": "50",
		} {
			if got, ok := c[k]; !ok || got.Value == nil || *got.Value != v {
				t.Errorf("broker config %s = %v (present %v), want %q", k, strp(got.Value), ok, v)
			}
		}
	})

	t.Run("DescribeBrokerConfigsClusterDefault", func(t *testing.T) {
		// Resource name "": Kafka answers the cluster-wide dynamic defaults
		// only, which are none on a fresh broker.
		rcs, err := adm.DescribeBrokerConfigs(ctx)
		if err != nil {
			t.Fatalf("DescribeBrokerConfigs(): %v", err)
		}
		if len(rcs) != 1 || rcs[0].Name != "" || rcs[0].Err != nil || len(rcs[0].Configs) != 0 {
			n := 0
			if len(rcs) == 1 {
				n = len(rcs[0].Configs)
			}
			t.Errorf("cluster default broker configs: %d resources, %d configs (err %v); want one resource, no configs (no dynamic defaults set)", len(rcs), n, func() error {
				if len(rcs) == 1 {
					return rcs[0].Err
				}
				return nil
			}())
		}
	})

	t.Run("DeleteTopics", func(t *testing.T) {
		dr, err := adm.DeleteTopics(ctx, ta, tb)
		if err != nil {
			t.Fatalf("DeleteTopics: %v", err)
		}
		for _, name := range []string{ta, tb} {
			if r := dr[name]; r.Err != nil || r.ID != ids[name] {
				t.Errorf("DeleteTopics %s: %+v, want no error and id %v", name, r, ids[name])
			}
		}
		// kadm's ListTopics answers from franz-go's metadata cache (5 s);
		// ask the broker directly.
		mreq := kmsg.NewPtrMetadataRequest()
		mresp, err := mreq.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("Metadata: %v", err)
		}
		var left []string
		for _, mt := range mresp.Topics {
			if !mt.IsInternal {
				left = append(left, strp(mt.Topic))
			}
		}
		if len(left) != 0 {
			t.Errorf("topics after delete: %v", left)
		}
		again, err := adm.DeleteTopics(ctx, ta)
		if err != nil || !isErr(again[ta].Err, kerr.UnknownTopicOrPartition) {
			t.Errorf("delete again: %v / %v, want UNKNOWN_TOPIC_OR_PARTITION", err, again[ta].Err)
		}
	})
}

func sorted32(ps []int32) []int32 {
	out := append([]int32(nil), ps...)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// batchLayout describes the record batches of a partition as the broker
// stores them: offsets, codec and max timestamp (relative to the first).
func batchLayout(t *testing.T, ctx context.Context, cl *kgo.Client, topic string, p int32) string {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MinBytes = 1
	req.MaxBytes = 16 << 20
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition = p
	rp.PartitionMaxBytes = 16 << 20
	rp.CurrentLeaderEpoch = -1
	rp.LogStartOffset = -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return fmt.Sprintf("(fetch failed: %v)", err)
	}
	raw := resp.Topics[0].Partitions[0].RecordBatches
	codecs := []string{"none", "gzip", "snappy", "lz4", "zstd"}
	var out []string
	for len(raw) >= 12 {
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(raw); err != nil {
			break
		}
		n := 12 + int(rb.Length)
		out = append(out, fmt.Sprintf("[%d..%d %s maxTs=firstTs+%dms]", rb.FirstOffset, rb.FirstOffset+int64(rb.LastOffsetDelta),
			codecs[rb.Attributes&7], rb.MaxTimestamp-rb.FirstTimestamp))
		if n > len(raw) {
			break
		}
		raw = raw[n:]
	}
	return strings.Join(out, " ")
}
