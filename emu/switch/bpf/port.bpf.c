// SPDX-License-Identifier: GPL-2.0-only
/*
 * One switch egress port's queue, in the kernel (emu/switch/kernel.py loads it).
 *
 * Attached at the port's tc egress hook (clsact), in front of a tbf qdisc that
 * serializes at the port's rate. The program keeps a *virtual* FIFO of that
 * rate: t_free is when the queue would be empty; the backlog a packet finds is
 * (t_free - now) x rate. tbf at the same rate holds the real packets, so the
 * model's backlog is the real queue (to within tbf's burst). At arrival, for
 * transport packets (UDP 4791 / 4793, IP protocol 253), in the user-space
 * pipeline's order (emu/switch/queue.py, the reference): random loss; tail
 * drop beyond `depth`; RED CE marking of ECT packets on the backlog
 * (kmin/kmax/pmax of the packet's class). Every other packet occupies the
 * queue (it is on the wire) but is never dropped or marked here.
 *
 * Why in the kernel: a Python switch daemon costs ~100 us per packet per hop
 * and falls behind its schedule on two cores; the kernel path costs a few
 * hundred ns and cannot fall behind (tbf runs in softirq).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define NCLASS 64

struct klass {
	__u32 ecn;        /* 1: mark ECT packets */
	__u32 kmin;       /* bytes */
	__u32 kmax;       /* bytes */
	__u32 pmax;       /* marking probability just below kmax, x 2^32 - 1 */
};

struct port_cfg {
	__u64 ps_per_byte;      /* 8e12 / rate; 0 = no queue (loss only) */
	__u64 depth;            /* data buffer, bytes */
	__u32 loss;             /* random loss probability x 2^32 - 1 */
	__u32 udp_port[4];      /* matched UDP destination ports (0 = unused) */
	__u32 ip_proto[2];      /* matched IP protocols (0 = unused) */
	__u8 dscp_class[64];    /* DSCP -> class */
	struct klass cls[NCLASS];
};

struct port_state {
	struct bpf_spin_lock lock;
	__u64 t_free;           /* ns (bpf_ktime_get_ns) when the virtual queue empties */
	__u64 seen;             /* every packet through the hook */
	__u64 enqueued;         /* transport packets queued */
	__u64 bytes;            /* their bytes */
	__u64 other;            /* packets of any other kind (queued, never dropped or marked) */
	__u64 marked;
	__u64 dropped_tail;
	__u64 dropped_random;
	__u64 max_depth;        /* bytes */
	__u64 not_ip;           /* frames that are not IPv4/IPv6 with a full header */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct port_cfg);
} emu_port_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct port_state);
} emu_port_state SEC(".maps");

static __always_inline int matched(const struct port_cfg *c, __u8 proto, __u16 dport)
{
	if (proto == IPPROTO_UDP) {
#pragma unroll
		for (int i = 0; i < 4; i++)
			if (c->udp_port[i] && c->udp_port[i] == dport)
				return 1;
		return 0;
	}
#pragma unroll
	for (int i = 0; i < 2; i++)
		if (c->ip_proto[i] && c->ip_proto[i] == proto)
			return 1;
	return 0;
}

static __always_inline void set_ce(struct __sk_buff *skb, int v4, __u32 l3)
{
	if (v4) {
		__u8 tos;
		if (bpf_skb_load_bytes(skb, l3 + 1, &tos, 1))
			return;
		/* the 16-bit word holding version/IHL and TOS, for the checksum */
		__u8 w[2];
		if (bpf_skb_load_bytes(skb, l3, w, 2))
			return;
		__u16 before = ((__u16)w[0] << 8) | w[1];
		__u8 ntos = tos | 3;
		__u16 after = ((__u16)w[0] << 8) | ntos;
		bpf_l3_csum_replace(skb, l3 + 10, bpf_htons(before), bpf_htons(after), 2);
		bpf_skb_store_bytes(skb, l3 + 1, &ntos, 1, 0);
	} else {
		__u8 b1;
		if (bpf_skb_load_bytes(skb, l3 + 1, &b1, 1))
			return;
		b1 |= 0x30;   /* traffic class bits 0-1 (ECN) are bits 5-4 of byte 1 */
		bpf_skb_store_bytes(skb, l3 + 1, &b1, 1, 0);
	}
}

SEC("tc")
int emu_port(struct __sk_buff *skb)
{
	__u32 key = 0;
	struct port_cfg *c = bpf_map_lookup_elem(&emu_port_cfg, &key);
	struct port_state *s = bpf_map_lookup_elem(&emu_port_state, &key);
	if (!c || !s)
		return TC_ACT_OK;

	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	__u8 proto = 0, dscp = 0, ecn = 0;
	__u16 dport = 0;
	int v4 = 0, ip = 0;
	__u32 l3 = sizeof(*eth);

	if ((void *)(eth + 1) <= end) {
		if (eth->h_proto == bpf_htons(ETH_P_IP)) {
			struct iphdr *iph = (void *)(eth + 1);
			if ((void *)(iph + 1) <= end && iph->ihl >= 5) {
				ip = v4 = 1;
				proto = iph->protocol;
				dscp = iph->tos >> 2;
				ecn = iph->tos & 3;
				struct udphdr *uh = (void *)iph + iph->ihl * 4;
				if (proto == IPPROTO_UDP && (void *)(uh + 1) <= end)
					dport = bpf_ntohs(uh->dest);
			}
		} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
			struct ipv6hdr *ip6 = (void *)(eth + 1);
			if ((void *)(ip6 + 1) <= end) {
				ip = 1;
				proto = ip6->nexthdr;
				__u8 tc = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
				dscp = tc >> 2;
				ecn = tc & 3;
				struct udphdr *uh = (void *)(ip6 + 1);
				if (proto == IPPROTO_UDP && (void *)(uh + 1) <= end)
					dport = bpf_ntohs(uh->dest);
			}
		}
	}
	int transport = ip && matched(c, proto, dport);
	__u64 len = skb->len;
	__u64 now = bpf_ktime_get_ns();
	__u32 rnd = bpf_get_prandom_u32();
	__u32 rnd2 = bpf_get_prandom_u32();
	int verdict = TC_ACT_OK, mark = 0;

	bpf_spin_lock(&s->lock);
	s->seen++;
	if (!ip)
		s->not_ip++;
	if (!transport)
		s->other++;
	if (transport) {
		if (c->loss && rnd < c->loss) {
			s->dropped_random++;
			verdict = TC_ACT_SHOT;
			goto out;
		}
	}
	if (c->ps_per_byte) {
		__u64 depth = 0;
		if (s->t_free > now)
			depth = (s->t_free - now) * 1000 / c->ps_per_byte;
		if (transport && depth + len > c->depth) {
			s->dropped_tail++;
			verdict = TC_ACT_SHOT;
			goto out;
		}
		if (transport && (ecn == 1 || ecn == 2)) {
			const struct klass *k = &c->cls[c->dscp_class[dscp & 63] & (NCLASS - 1)];
			if (k->ecn && depth >= k->kmin) {
				if (depth >= k->kmax)
					mark = 1;
				else if (k->kmax > k->kmin) {
					__u64 p = (__u64)k->pmax * (depth - k->kmin) / (k->kmax - k->kmin);
					mark = rnd2 < p;
				}
			}
		}
		__u64 start = s->t_free > now ? s->t_free : now;
		s->t_free = start + len * c->ps_per_byte / 1000;
		depth += len;
		if (depth > s->max_depth)
			s->max_depth = depth;
		if (mark)
			s->marked++;
	}
	if (transport) {
		s->enqueued++;
		s->bytes += len;
	}
out:
	bpf_spin_unlock(&s->lock);
	if (mark)
		set_ce(skb, v4, l3);
	return verdict;
}

char LICENSE[] SEC("license") = "GPL";
