// SPDX-License-Identifier: GPL-2.0-only
/*
 * SRv6 uSID forwarding and decapsulation in tc BPF (emu/fabric/srv6bpf.py loads it).
 *
 * Why: `[routing] mode = "srv6"` needs two SRv6 behaviours, a switch's uSID
 * shift (seg6local End with the NEXT-C-SID flavor) and a host's decap
 * (End.DT6). Some of our kernels are built without CONFIG_IPV6_SEG6_LWTUNNEL
 * (no seg6local routes at all), and the kernel's End.DT6 drops the outer
 * header's ECN: a CE mark a switch put on the outer header never reaches the
 * receiver's transport (RFC 6040 asks the decapsulator to copy it). Both are
 * a few byte moves per packet, done here on the clsact *ingress* hook of every
 * port, before the kernel's routing decision.
 *
 * Each node's programs read its 48-bit locator (32-bit uSID block fc00:0000 +
 * the node's 16-bit uSID, emu/topology/addressing.py) from a one-entry array
 * (srv6_cfg) and count what they did in another (srv6_stats). Every tc filter
 * loads its own copy of the maps: one configuration and one set of counters
 * per port.
 *
 * srv6_shift (switches): a packet whose destination's first 48 bits are the
 * node's locator and whose next header is 41 (IPv6-in-IPv6) or 43 (routing
 * header):
 *   - the remaining 80 bits (the next uSIDs) are not zero: shift everything
 *     after the 32-bit block left by 16 bits, so the next uSID takes ours, and
 *     zero-fill (NEXT-C-SID, lblen 32, nflen 16);
 *   - else, an SRH (type 4) with Segments Left > 0 follows the IPv6 header:
 *     classic End, Segments Left - 1 and destination = Segment List[SL]
 *     (RFC 8754 4.3.1.1), as the kernel's End falls back to;
 *   - else: left as it is (counted in `passed`).
 * The kernel then routes the new destination (and decrements the hop limit).
 * A bare transport packet (UDP, ICMPv6 ...) to the locator is left alone: its
 * checksum covers the destination (counted in `bare`).
 *
 * srv6_decap (hosts, the NIC's job): a packet to the node's locator /48 whose
 * next header is 41, or 43 with an SRH whose Segments Left is 0 and whose next
 * header is 41: the outer IPv6 header and the SRH are removed
 * (bpf_skb_adjust_room at the MAC layer), the ECN field is combined per
 * RFC 6040 section 4.2 (outer CE on inner ECT(0)/ECT(1) -> CE; outer ECT(1) on
 * inner ECT(0) -> ECT(1); outer CE on inner Not-ECT: dropped, counted), and the
 * inner packet goes up as if it had arrived bare. An SRH with Segments Left > 0
 * at its last SID is dropped (End.DT6 drops it too).
 *
 * What it approximates: the SRH must follow the IPv6 header directly (no
 * hop-by-hop or destination options before it) and hold at most MAX_SEGS
 * segments; no HMAC TLV is checked; only IPv6-in-IPv6 is decapsulated (no IPv4
 * or L2 payloads), and only at Segments Left 0; a flavor is NEXT-C-SID alone
 * (no PSP/USP/USD).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define L3 ((__u32)sizeof(struct ethhdr))
#define DST_OFF (L3 + 24)
#define SRH_OFF (L3 + (__u32)sizeof(struct ipv6hdr))
/* the largest Segments Left the program follows (RFC 8754 allows 255) */
#define MAX_SEGS 32

struct srv6_cfg {
	__u8 locator[6];        /* block (4 bytes) + uSID (2), network order */
	__u8 on;                /* 1 once the loader wrote the locator (0: pass everything) */
	__u8 pad;
};

/* every field a __u64, in this order (srv6bpf.STATS) */
struct srv6_stats {
	__u64 seen;             /* every frame through the hook */
	__u64 not_mine;         /* IPv6, destination outside the node's locator */
	__u64 shifted;          /* switch: uSID shift */
	__u64 srh_end;          /* switch: classic SRH End (Segments Left - 1) */
	__u64 passed;           /* ours, but nothing to do (container exhausted, no SRH left) */
	__u64 bare;             /* ours, next header neither 41 nor 43: left alone */
	__u64 decapped;         /* host: outer header (and SRH) removed */
	__u64 ce_copied;        /* host: outer CE copied to the inner header */
	__u64 dropped_ecn;      /* host: outer CE on an inner Not-ECT packet (RFC 6040) */
	__u64 dropped_srh;      /* host: SRH with Segments Left > 0 at its last SID */
	__u64 malformed;        /* truncated headers, a bad SRH: dropped */
	__u64 failed;           /* a helper refused (adjust_room, store): dropped */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct srv6_cfg);
} srv6_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct srv6_stats);
} srv6_stats SEC(".maps");

#define COUNT(s, f) __sync_fetch_and_add(&(s)->f, 1)

/* the 8-byte fixed part of an SRH (RFC 8754 2) */
struct srh {
	__u8 nexthdr;
	__u8 hdrlen;            /* 8-octet units, not counting the first 8 */
	__u8 type;              /* 4 */
	__u8 segleft;
	__u8 lastentry;
	__u8 flags;
	__u16 tag;
};

enum { MINE_NO = 0, MINE_YES = 1, MINE_BAD = -1 };

/* Loads the outer IPv6 header; MINE_YES when its destination is in the node's locator. */
static __always_inline int mine(struct __sk_buff *skb, const struct srv6_cfg *c,
				struct ipv6hdr *ip6)
{
	if (skb->protocol != bpf_htons(ETH_P_IPV6))
		return MINE_NO;
	if (bpf_skb_load_bytes(skb, L3, ip6, sizeof(*ip6)))
		return MINE_BAD;
	const __u8 *d = ip6->daddr.s6_addr;
#pragma unroll
	for (int i = 0; i < 6; i++)
		if (d[i] != c->locator[i])
			return MINE_NO;
	return MINE_YES;
}

/* What both programs do first: the node's configuration and counters, the packet
 * counted, its outer IPv6 header loaded into ip6. MINE_YES: addressed to the node's
 * locator (s is set); MINE_NO: not ours (pass it on); MINE_BAD: malformed (counted,
 * to be dropped). */
static __always_inline int arrive(struct __sk_buff *skb, struct srv6_stats **sp,
				  struct ipv6hdr *ip6)
{
	__u32 key = 0;
	struct srv6_cfg *c = bpf_map_lookup_elem(&srv6_cfg, &key);
	struct srv6_stats *s = bpf_map_lookup_elem(&srv6_stats, &key);
	*sp = s;
	if (!c || !s || !c->on)
		return MINE_NO;
	COUNT(s, seen);
	int m = mine(skb, c, ip6);
	if (m == MINE_BAD)
		COUNT(s, malformed);
	else if (m == MINE_NO && skb->protocol == bpf_htons(ETH_P_IPV6))
		COUNT(s, not_mine);
	return m;
}

static __always_inline int load_srh(struct __sk_buff *skb, struct srh *h)
{
	if (bpf_skb_load_bytes(skb, SRH_OFF, h, sizeof(*h)))
		return -1;
	/* type 4, Segments Left within the list, the list within the header */
	if (h->type != 4 || h->segleft > h->lastentry
	    || ((__u32)h->hdrlen << 3) < ((__u32)h->lastentry + 1) * 16)
		return -1;
	return 0;
}

SEC("tc/srv6_shift")
int srv6_shift(struct __sk_buff *skb)
{
	struct srv6_stats *s;
	struct ipv6hdr ip6;
	int a = arrive(skb, &s, &ip6);
	if (a != MINE_YES)
		return a == MINE_BAD ? TC_ACT_SHOT : TC_ACT_OK;
	if (ip6.nexthdr != IPPROTO_IPV6 && ip6.nexthdr != IPPROTO_ROUTING) {
		COUNT(s, bare);
		return TC_ACT_OK;
	}
	__u8 *d = ip6.daddr.s6_addr;
	__u8 any = 0;
#pragma unroll
	for (int i = 6; i < 16; i++)
		any |= d[i];
	if (any) {
		/* NEXT-C-SID: the block stays, the uSIDs after ours move up by one into
		 * our place, zero-filled (the kernel's seg6_next_csid_advance_arg) */
		struct in6_addr nd;
#pragma unroll
		for (int i = 0; i < 4; i++)
			nd.s6_addr[i] = d[i];
#pragma unroll
		for (int i = 4; i < 14; i++)
			nd.s6_addr[i] = d[i + 2];
		nd.s6_addr[14] = 0;
		nd.s6_addr[15] = 0;
		if (bpf_skb_store_bytes(skb, DST_OFF, &nd, sizeof(nd), BPF_F_RECOMPUTE_CSUM)) {
			COUNT(s, failed);
			return TC_ACT_SHOT;
		}
		COUNT(s, shifted);
		return TC_ACT_OK;
	}
	if (ip6.nexthdr != IPPROTO_ROUTING) {
		COUNT(s, passed);
		return TC_ACT_OK;
	}
	struct srh h;
	if (load_srh(skb, &h)) {
		COUNT(s, malformed);
		return TC_ACT_SHOT;
	}
	if (h.segleft == 0) {
		COUNT(s, passed);
		return TC_ACT_OK;
	}
	__u32 sl = h.segleft - 1;
	if (sl >= MAX_SEGS) {
		COUNT(s, malformed);
		return TC_ACT_SHOT;
	}
	struct in6_addr next;
	if (bpf_skb_load_bytes(skb, SRH_OFF + sizeof(h) + sl * 16, &next, sizeof(next))) {
		COUNT(s, malformed);
		return TC_ACT_SHOT;
	}
	__u8 nsl = sl;
	if (bpf_skb_store_bytes(skb, SRH_OFF + 3, &nsl, 1, BPF_F_RECOMPUTE_CSUM)
	    || bpf_skb_store_bytes(skb, DST_OFF, &next, sizeof(next), BPF_F_RECOMPUTE_CSUM)) {
		COUNT(s, failed);
		return TC_ACT_SHOT;
	}
	COUNT(s, srh_end);
	return TC_ACT_OK;
}

/* RFC 6040 4.2: the inner ECN field after decapsulation; -1: drop */
static __always_inline int ecn_decap(__u8 inner, __u8 outer)
{
	if (outer == 3)
		return inner == 0 ? -1 : 3;
	if (outer == 1 && inner == 2)
		return 1;
	return inner;
}

SEC("tc/srv6_decap")
int srv6_decap(struct __sk_buff *skb)
{
	struct srv6_stats *s;
	struct ipv6hdr ip6;
	int a = arrive(skb, &s, &ip6);
	if (a != MINE_YES)
		return a == MINE_BAD ? TC_ACT_SHOT : TC_ACT_OK;
	__u32 outer = sizeof(struct ipv6hdr);
	if (ip6.nexthdr == IPPROTO_ROUTING) {
		struct srh h;
		if (load_srh(skb, &h)) {
			COUNT(s, malformed);
			return TC_ACT_SHOT;
		}
		if (h.segleft != 0) {
			COUNT(s, dropped_srh);
			return TC_ACT_SHOT;
		}
		if (h.nexthdr != IPPROTO_IPV6) {
			COUNT(s, bare);
			return TC_ACT_OK;
		}
		outer += ((__u32)h.hdrlen + 1) << 3;
	} else if (ip6.nexthdr != IPPROTO_IPV6) {
		COUNT(s, bare);
		return TC_ACT_OK;
	}
	if (outer > 40 + 8 + 16 * MAX_SEGS) {
		COUNT(s, malformed);
		return TC_ACT_SHOT;
	}
	/* the inner header's first two bytes: version, then the traffic class across the
	 * byte boundary; ECN is its low two bits, bits 5-4 of byte 1 */
	__u8 ib[2];
	if (bpf_skb_load_bytes(skb, L3 + outer, ib, 2) || (ib[0] >> 4) != 6) {
		COUNT(s, malformed);
		return TC_ACT_SHOT;
	}
	__u8 ib1 = ib[1];
	__u8 oecn = ip6.flow_lbl[0] >> 4 & 3;
	__u8 iecn = ib1 >> 4 & 3;
	int necn = ecn_decap(iecn, oecn);
	if (necn < 0) {
		COUNT(s, dropped_ecn);
		return TC_ACT_SHOT;
	}
	if (necn != iecn) {
		ib1 = (ib1 & 0xcf) | (necn << 4);
		if (bpf_skb_store_bytes(skb, L3 + outer + 1, &ib1, 1, BPF_F_RECOMPUTE_CSUM)) {
			COUNT(s, failed);
			return TC_ACT_SHOT;
		}
		if (necn == 3)
			COUNT(s, ce_copied);
	}
	if (bpf_skb_adjust_room(skb, -(__s32)outer, BPF_ADJ_ROOM_MAC,
				BPF_F_ADJ_ROOM_FIXED_GSO)) {
		COUNT(s, failed);
		return TC_ACT_SHOT;
	}
	COUNT(s, decapped);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
