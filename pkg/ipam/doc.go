// Package ipam allocates pod and tunnel addresses from IP pools, Calico
// style: pools are carved into blocks, nodes claim blocks by affinity and
// allocate from their own blocks first, borrowing single addresses from
// other nodes' blocks when they cannot claim more (unless strictAffinity).
//
// All state lives in etcd under /routed/v1/ipam/: blocks, affinities and
// handles. Every write is an etcd transaction conditional on the revision
// the writer read, and a block and the handle records naming its
// addresses always change in the same transaction, so the records never
// disagree and a crash never leaves a half-made allocation. README.md
// describes the key layout and the model.
//
// A Client caches blocks, handles and pool metadata and checks the cache
// in the write itself, so an allocation in an owned block costs one etcd
// transaction; a stale cache costs a retry, never a wrong answer.
package ipam
