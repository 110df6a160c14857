package tier

// Wiring a node
//
// One Tier per node, over the node's *store.Store:
//
//	t, err := tier.New(ctx, tier.Config{
//		NodeID:     nodeID,
//		JournalDir: filepath.Join(firstMountpath, ".tier"), // survives restarts
//		SpoolDir:   filepath.Join(firstMountpath, ".spool"), // on a fast drive
//		MaxDirtyBytes: ..., Replicator: peerReplicator,
//	}, st)
//
// For every bucket in the cluster map (and on every change of its
// properties) the node calls t.AddBucket(name, tier.Bucket{Mode, Backend,
// Validate, Copies}), building the backend with backend/open.New(ctx, spec);
// RemoveBucket when it is deleted. Pending destages of a bucket wait until it
// is added, so the journal replayed by New is safe before the map is known.
//
// On the owner of an object the S3 layer calls t.Get, t.Stat, t.Put,
// t.Delete and t.List instead of the store. A warm Get returns a
// *store.Reader (use its File method for sendfile); other readers stream.
//
// Writeback with Copies > 1: Config.Replicator.Replicate receives the body
// while the owner writes its own copy and sends it to Copies-1 peers (by HRW
// order after the owner); each peer's endpoint calls PutReplica(owner, seq,
// ...) on its own Tier. ReplicateDelete and Destaged reach the peers'
// DeleteReplica and ReplicaDestaged the same way. These calls should carry
// timeouts: the destager waits for Destaged.
//
// When the cluster declares a node dead, the first live node after it in the
// HRW order of each object holds a replica; the node calls
// t.TakeOver(ctx, deadID) on every live node (each adopts only the replicas
// it holds; duplicates are harmless re-uploads of the same bytes). A node
// that comes back after being taken over keeps its journal: every destage
// first compares the write time stamped in the backend object's metadata
// with its own, so an old backlog never overwrites a newer write, and its
// copies of keys rewritten elsewhere are dropped.
//
// Backlog() feeds `slipstream admin` and the metrics (objects, bytes,
// oldest age, replica counts, failures); Prefetch with a Filter of "keys
// this node owns" run on every node fills a bucket across the cluster;
// Evict drops clean copies.
