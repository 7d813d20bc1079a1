"""A data directory of an earlier single-node release — partition logs and the
`cluster-metadata.json` that held their topics, no metadata log — is carried over at the
first start: the topics (same ids, configs), the cluster id and the producer-id mark go
into the metadata log once, every record stays readable, and the partitions are led in
the epoch after the one they had."""

from __future__ import annotations

import json
import shutil
import uuid

from confluent_kafka.admin import AdminClient
from test_leader_epochs import batch_epochs, create, fetch_v12, metadata_epoch, produce


def test_an_earlier_single_node_data_directory_is_carried_over(broker_factory):
    b = broker_factory()
    create(b.bootstrap, "kept", config={"retention.ms": "86400000"})
    produce(b.bootstrap, "kept", [b"a", b"b", b"c"])
    epoch = metadata_epoch(b.bootstrap, "kept")
    b.stop()

    # What the earlier release left behind: its metadata file, and no metadata log.
    shutil.rmtree(b.data_dir / "__cluster_metadata")
    topic_id = str(uuid.uuid4())
    (b.data_dir / "cluster-metadata.json").write_text(json.dumps({
        "cluster_id": "0123456789abcdef0123456789abcdef",
        "topics": {"kept": {"name": "kept", "id": topic_id, "partitions": 1,
                            "configs": {"retention.ms": "86400000"}, "leader_epoch": epoch}},
        "next_producer_id": 5000,
        "client_quotas": {"entries": []},
        "broker_configs": {},
    }))
    b.start()
    md = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=30)
    assert md.cluster_id == "0123456789abcdef0123456789abcdef", "the cluster keeps its id"
    assert len(md.topics["kept"].partitions) == 1
    assert metadata_epoch(b.bootstrap, "kept") == epoch + 1, "led in the next epoch"
    f = fetch_v12(b.bootstrap, "kept", 0)
    assert f["error_code"] == 0 and f["high_watermark"] == 3, f
    assert [o for o, _ in batch_epochs(f["records"])] == [0, 1, 2], "every record still there"
    assert (b.data_dir / "cluster-metadata.json.imported").exists()
    assert not (b.data_dir / "cluster-metadata.json").exists()

    # Imported once: the next start changes nothing.
    produce(b.bootstrap, "kept", [b"d"])
    b.restart()
    f = fetch_v12(b.bootstrap, "kept", 0)
    assert f["error_code"] == 0 and f["high_watermark"] == 4, f
