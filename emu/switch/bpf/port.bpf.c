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
 * pipeline's order (emu/switch/queue.py, the reference): random loss;
 * trimming (the class trims and its backlog is above trim_threshold, or the
 * packet would be tail-dropped); tail drop beyond `depth`; RED CE marking of
 * ECT packets on the backlog (kmin/kmax/pmax of the packet's class). Every
 * other packet occupies the queue (it is on the wire) but is never dropped or
 * marked here.
 *
 * Trimming (emu/switch/trim.py is the reference, and the tests hold the two
 * byte for byte): the packet is cut after its transport headers — RoCEv2/MRC:
 * BTH, the opcode's extension headers, the pad and a recomputed ICRC; UET:
 * entropy, PDS, SES and its extension header — or at `trim_size`; the DSCP
 * becomes the trimmed one (the ECN bits stay), IP lengths and the IPv4 header
 * checksum are rewritten and the UDP length and checksum fixed: a full
 * checksum is recomputed, a pending one (CHECKSUM_PARTIAL, what a veth hands
 * over) gets the pseudo header of the new length, and a zero IPv4 checksum
 * stays zero. Which is which is asked of the kernel itself:
 * bpf_l4_csum_replace changes a full checksum and leaves a pending one alone.
 * How long the headers are comes from tables the loader builds from emu's own
 * codecs (one rule, in one place); this program only indexes them. Trimmed
 * packets go to the strict-priority band of the prio qdisc under tbf (ahead
 * of data), within `trim_depth`. Not trimmed here (they are treated as data):
 * GSO super-packets, tunnelled packets, IPv6 extension headers.
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

#define TRIM_MAX 256      /* bytes of the IP packet a trim keeps at most (2x: 511) */
#define NO_THRESHOLD 0xFFFFFFFFu

struct klass {
	__u32 ecn;        /* 1: mark ECT packets */
	__u32 kmin;       /* bytes */
	__u32 kmax;       /* bytes */
	__u32 pmax;       /* marking probability just below kmax, x 2^32 - 1 */
	__u32 trim;       /* 1: trim this class's transport packets */
	__u32 trim_threshold;  /* backlog bytes above which to trim; NO_THRESHOLD: at tail drop */
	__u32 lossless;   /* 1: PFC: note which ingress port each packet came from */
};

struct port_cfg {
	__u64 ps_per_byte;      /* 8e12 / rate; 0 = no queue (loss only) */
	__u64 depth;            /* data buffer, bytes */
	__u32 loss;             /* random loss probability x 2^32 - 1 */
	__u32 udp_port[4];      /* matched UDP destination ports (0 = unused) */
	__u32 ip_proto[2];      /* matched IP protocols (0 = unused) */
	__u8 dscp_class[64];    /* DSCP -> class */
	struct klass cls[NCLASS];
	__u64 trim_depth;       /* bytes of trimmed packets queued at most */
	__u64 trim_dscps;       /* bit d set: DSCP d is trimmable */
	__u32 trim_size;        /* cut at this IP size instead (0: after the headers) */
	__u32 trimmed_dscp;     /* what a trimmed packet's DSCP becomes here */
	__u32 roce_port[2];     /* UDP ports with RoCEv2 framing (RoCEv2, MRC) */
	__u32 uet_port;         /* UET over UDP */
	__u32 uet_proto;        /* native UET (IP protocol) */
	__u32 prio_major;       /* the prio qdisc's handle << 16 (0: none) */
	__u8 roce_ext[2][256];  /* bytes after BTH by [BTH.TS][opcode]; 0xFF: unknown */
	__u8 uet_pds[32][2];    /* PDS bytes by [type][SYN/SP bit]; 0: not trimmed */
	__u8 uet_ses[16][2];    /* SES bytes by [next_hdr][SOM]; 0: none or unknown */
	__u8 uet_ses_req[16];   /* by next_hdr: 1 a request, 2 a standard request */
	__u8 uet_ext_op[64];    /* by SES opcode: 1 atomic, 2 rendezvous */
	__u8 uet_amo_cas[256];  /* by AMO opcode: 1 the compare-and-swap header */
	__u8 uet_ext_size[3];   /* atomic, compare-and-swap, rendezvous header bytes */
	/* PFC received: the downstream neighbour paused this port (the daemon holds tbf) */
	__u64 hold_start;       /* ns (bpf_ktime_get_ns) the hold began; 0: not held */
	__u64 held_ns;          /* how long earlier holds lasted, in all */
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
	__u64 t_prio_free;      /* ns when the trimmed packets queued are sent */
	__u64 trimmed;
	__u64 dropped_trim;     /* trimmed packets beyond trim_depth */
	__u64 trim_failed;      /* to be trimmed, could not be (sent as data instead) */
	__u64 t_last;           /* the latest `now` the queue was updated at */
};

/*
 * PFC: for each ingress port (slot = ifindex mod 64) and priority (class mod 8), the
 * departure time of the latest lossless packet it sent into this queue: it still has
 * packets queued while that time is ahead. The switch daemon's agent reads this with
 * the backlog, decides XOFF/XON by the reference's rule (emu/switch/pausebook.py) and
 * sends the pause frames (emu/switch/kernel_pfc.py).
 */
#define INGRESS_SLOTS 64

/*
 * One program per switch, attached to every kernel port: each port's configuration,
 * state and PFC table are the maps' entries at its slot, which the loader gives each
 * port (emu_port_slot: egress ifindex -> slot; ifindexes are as large as the machine's
 * count of interfaces, since a veth keeps its index when moved into a namespace). A
 * packet on a port without a slot passes untouched. Why not a program per port: each
 * load is a verifier pass (~90 ms here), 15 s of a 256-host leaf-spine's start.
 */
#define PORT_SLOTS 256

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PORT_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} emu_port_slot SEC(".maps");

struct ingress_tab {
	__u32 ifindex[INGRESS_SLOTS];
	__u64 t_last[INGRESS_SLOTS][8];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PORT_SLOTS);
	__type(key, __u32);
	__type(value, struct ingress_tab);
} emu_port_pfc SEC(".maps");

/* the kept bytes of a packet being trimmed (per CPU: the program runs on one at a time);
 * twice the room it needs, so that an index the compiler has proven below TRIM_MAX,
 * in a form the verifier cannot follow, still falls inside */
struct scratch {
	__u8 b[2 * TRIM_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} emu_port_scr SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PORT_SLOTS);
	__type(key, __u32);
	__type(value, struct port_cfg);
} emu_port_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PORT_SLOTS);
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

static __always_inline __u8 byte_at(struct __sk_buff *skb, __u32 off)
{
	__u8 b = 0;
	bpf_skb_load_bytes(skb, off, &b, 1);
	return b;
}

/*
 * Where a trim cuts: the bytes of the IP packet (from l3) that stay, or 0 when
 * this packet is not trimmed (not a transport with headers we know, nothing
 * after them, or more than TRIM_MAX to keep). *roce: an ICRC to recompute.
 * The header sizes are the loader's tables (emu's codecs).
 */
static __always_inline __u32 trim_cut(struct __sk_buff *skb, const struct port_cfg *c,
				      __u32 l3, __u32 iphl, __u8 proto, __u16 dport,
				      __u32 ip_len, int *roce)
{
	__u32 body = l3 + iphl, hdr = 0;
	int known = 0;
	*roce = 0;
	if (proto == IPPROTO_UDP) {
		body += 8;
		if (dport && (dport == c->roce_port[0] || dport == c->roce_port[1])) {
			__u8 bth[12];
			if (bpf_skb_load_bytes(skb, body, bth, sizeof(bth)))
				return 0;
			__u8 ext = c->roce_ext[(bth[8] >> 4) & 1][bth[0]];
			if (ext == 0xFF)
				return 0;
			hdr = 12 + ext + ((bth[1] >> 4) & 3) + 4;   /* BTH, ext, pad, ICRC */
			*roce = 1;
			known = 1;
		} else if (dport && dport == c->uet_port) {
			known = 2;
		}
	} else if (c->uet_proto && proto == c->uet_proto) {
		body += 4;            /* the entropy header */
		known = 2;
	}
	if (known == 2) {
		__u8 b0 = byte_at(skb, body), b1 = byte_at(skb, body + 1);
		__u8 t = b0 >> 3;
		__u8 v = t == 1 ? (b0 >> 2) & 1 : (b1 >> 2) & 1;
		__u32 pds = c->uet_pds[t & 31][v];
		if (!pds)
			return 0;
		hdr = pds;
		__u8 nh = (b1 >> 7) | ((b0 & 7) << 1);
		if (t != 1 && nh) {
			__u8 som = byte_at(skb, body + pds + 1) & 1;
			__u32 ses = c->uet_ses[nh & 15][som];
			if (!ses)
				return 0;
			hdr += ses;
			__u8 req = c->uet_ses_req[nh & 15];
			if (req) {
				__u8 k = c->uet_ext_op[byte_at(skb, body + pds) & 63];
				if (k == 1)
					hdr += c->uet_amo_cas[byte_at(skb, body + pds + ses)] ?
						c->uet_ext_size[1] : c->uet_ext_size[0];
				else if (k == 2 && req == 2)
					hdr += c->uet_ext_size[2];
			}
		}
	}
	__u32 cut;
	if (known)
		cut = body - l3 + hdr;
	else if (c->trim_size)
		cut = iphl + (proto == IPPROTO_UDP ? 8 : 0);
	else
		return 0;
	if (c->trim_size > cut)
		cut = c->trim_size;
	if (cut >= ip_len || cut > TRIM_MAX)
		return 0;
	return cut;
}

/*
 * Loops over the kept bytes run under bpf_loop (kernel 5.17): the verifier checks the
 * step once, where a plain bounded loop is checked iteration by iteration and the whole
 * program passed its million-instruction budget. Indices stay below 2 * TRIM_MAX (the
 * scratch buffer's size) by construction.
 */
static __always_inline __u64 idx(__u64 k)
{
	/* a mask the compiler may not drop: it can prove k < TRIM_MAX, the verifier
	 * cannot follow that proof through the copies it makes */
	asm volatile("%0 &= 511" : "+r"(k));
	return k;
}
#define IDX(k) idx(k)

struct sum_ctx {
	const __u8 *b;
	__u32 from, to, sum;
};

static long sum_step(__u64 i, void *vctx)
{
	struct sum_ctx *x = vctx;
	__u32 k = x->from + (__u32)i * 2;
	if (k >= x->to || k >= TRIM_MAX)
		return 1;
	__u32 w = (__u32)x->b[IDX(k)] << 8;
	if (k + 1 < x->to)
		w |= x->b[IDX(k + 1)];
	x->sum += w;
	return 0;
}

/* the 32-bit one's-complement sum of the 16-bit big-endian words of b[from..to) (an odd
 * last byte padded), added to sum */
static __always_inline __u32 sum16(const __u8 *b, __u32 from, __u32 to, __u32 sum)
{
	struct sum_ctx x = {b, from, to, sum};
	bpf_loop(TRIM_MAX / 2, sum_step, &x, 0);
	return x.sum;
}

static __always_inline __u16 fold(__u32 sum)
{
	sum = (sum & 0xFFFF) + (sum >> 16);
	sum = (sum & 0xFFFF) + (sum >> 16);
	return (__u16)sum;
}

static __always_inline __u32 crc32_byte(__u32 crc, __u8 byte)
{
	crc ^= byte;
#pragma unroll
	for (int k = 0; k < 8; k++)
		crc = (crc >> 1) ^ (0xEDB88320u & -(crc & 1));
	return crc;
}

struct crc_ctx {
	const __u8 *b;
	__u32 end, udp, crc;
	int v4;
};

static long crc_step(__u64 i, void *vctx)
{
	struct crc_ctx *x = vctx;
	__u32 k = (__u32)i;
	if (k >= x->end || k >= TRIM_MAX)
		return 1;
	__u8 v = x->b[IDX(k)];
	if (x->v4) {
		if (k == 1 || k == 8 || k == 10 || k == 11)
			v = 0xFF;                          /* TOS, TTL, header checksum */
	} else if (k == 0) {
		v |= 0x0F;                                 /* traffic class */
	} else if (k <= 3 || k == 7) {
		v = 0xFF;                                  /* ... flow label, hop limit */
	}
	if (k == x->udp + 6 || k == x->udp + 7 || k == x->udp + 8 + 4)
		v = 0xFF;                                  /* UDP checksum, BTH byte 4 */
	x->crc = crc32_byte(x->crc, v);
	return 0;
}

/*
 * RoCEv2's ICRC over the kept bytes (emu/wire/icrc.py): CRC-32 of 8 x 0xFF, the IP
 * header with its variant fields all ones, the UDP header with its checksum all
 * ones, the BTH with byte 4 all ones, and the rest up to the ICRC slot.
 */
static __always_inline __u32 icrc(const __u8 *b, __u32 iphl, int v4, __u32 end)
{
	__u32 crc = 0xFFFFFFFFu;
#pragma unroll
	for (int i = 0; i < 8; i++)
		crc = crc32_byte(crc, 0xFF);
	struct crc_ctx x = {b, end, iphl, crc, v4};
	bpf_loop(TRIM_MAX, crc_step, &x, 0);
	return x.crc ^ 0xFFFFFFFFu;
}

/*
 * Cut the packet at `cut` bytes of its IP packet and make it valid again (the module
 * comment says how); 0 when done. The caller has not touched the packet yet.
 */
static __always_inline int do_trim(struct __sk_buff *skb, const struct port_cfg *c,
				   __u32 l3, int v4, __u32 iphl, __u8 proto, __u64 cut, int roce)
{
	__u32 key = 0;
	struct scratch *sc = bpf_map_lookup_elem(&emu_port_scr, &key);
	/* the compiler knows trim_cut's bounds and would drop these checks; the verifier
	 * does not know them and needs them (the sizes of the loads and the store) */
	asm volatile("" : "+r"(cut));
	asm volatile("" : "+r"(iphl));
	if (!sc || cut < 28 || cut > TRIM_MAX || iphl > 60)
		return -1;
	__u8 *b = sc->b;
	__u64 size = cut;
	asm volatile("" : "+r"(size));
	if (size < 28 || size > TRIM_MAX)   /* on the register the helper gets */
		return -1;
	if (bpf_skb_load_bytes(skb, l3, b, size))
		return -1;
	int udp = proto == IPPROTO_UDP;
	__u32 u = iphl, csum_off = l3 + iphl + 6;
	__u16 old = 0;
	int partial = 0, zero = 0;
	if (udp) {
		if (bpf_skb_load_bytes(skb, csum_off, &old, 2))
			return -1;
		if (v4 && old == 0) {
			zero = 1;
		} else {
			/* a full checksum changes under a plain replace, a pending one does not */
			if (bpf_l4_csum_replace(skb, csum_off, 0, bpf_htons(1), 2))
				return -1;
			__u16 now = 0;
			if (bpf_skb_load_bytes(skb, csum_off, &now, 2))
				return -1;
			partial = now == old;
		}
	}
	if (bpf_skb_change_tail(skb, l3 + cut, 0))
		return -1;
	__u8 dscp = c->trimmed_dscp & 63;
	if (v4) {
		b[1] = (dscp << 2) | (b[1] & 3);
		b[2] = cut >> 8;
		b[3] = cut & 0xFF;
	} else {
		__u32 plen = cut - 40;
		b[0] = (b[0] & 0xF0) | (dscp >> 2);
		b[1] = ((dscp & 3) << 6) | (b[1] & 0x3F);
		b[4] = plen >> 8;
		b[5] = plen & 0xFF;
	}
	if (udp) {
		__u32 ulen = cut - u;
		b[IDX(u + 4)] = ulen >> 8;
		b[IDX(u + 5)] = ulen & 0xFF;
		if (roce) {
			__u32 v = icrc(b, iphl, v4, cut - 4);
#pragma unroll
			for (int k = 0; k < 4; k++)
				b[IDX(cut - 4 + k)] = (v >> (8 * k)) & 0xFF;
		}
		if (!zero) {
			/* the pseudo header: addresses, protocol, UDP length */
			__u32 ps = v4 ? sum16(b, 12, 20, 0) : sum16(b, 8, 40, 0);
			ps += IPPROTO_UDP + ulen;
			b[IDX(u + 6)] = 0;
			b[IDX(u + 7)] = 0;
			__u16 ck;
			if (partial) {
				ck = fold(ps);            /* what the stack leaves for the offload */
			} else {
				ck = ~fold(sum16(b, u, cut, ps));
				if (!ck)
					ck = 0xFFFF;
			}
			b[IDX(u + 6)] = ck >> 8;
			b[IDX(u + 7)] = ck & 0xFF;
		}
	} else if (roce) {
		return -1;
	}
	if (v4) {
		b[10] = 0;
		b[11] = 0;
		__u16 ck = ~fold(sum16(b, 0, iphl, 0));
		b[10] = ck >> 8;
		b[11] = ck & 0xFF;
	}
	size = cut;
	asm volatile("" : "+r"(size));
	if (size < 28 || size > TRIM_MAX)
		return -1;
	if (bpf_skb_store_bytes(skb, l3, b, size, 0))
		return -1;
	if (c->prio_major)
		skb->priority = c->prio_major | 1;   /* the strict-priority band */
	return 0;
}

SEC("tc")
int emu_port(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	__u32 *slot = bpf_map_lookup_elem(&emu_port_slot, &ifindex);
	if (!slot)
		return TC_ACT_OK;
	__u32 key = *slot;           /* this port's entries */
	if (key >= PORT_SLOTS)
		return TC_ACT_OK;
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
	__u32 l3 = sizeof(*eth), iphl = 0, ip_len = 0;

	if ((void *)(eth + 1) <= end) {
		if (eth->h_proto == bpf_htons(ETH_P_IP)) {
			struct iphdr *iph = (void *)(eth + 1);
			if ((void *)(iph + 1) <= end && iph->ihl >= 5) {
				ip = v4 = 1;
				proto = iph->protocol;
				dscp = iph->tos >> 2;
				ecn = iph->tos & 3;
				iphl = iph->ihl * 4;
				ip_len = bpf_ntohs(iph->tot_len);
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
				iphl = 40;
				ip_len = 40 + bpf_ntohs(ip6->payload_len);
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
	int verdict = TC_ACT_OK, mark = 0, trim = 0, roce = 0;
	__u64 departs = 0;   /* a queued lossless packet: when it leaves */
	const struct klass *k = &c->cls[c->dscp_class[dscp & 63] & (NCLASS - 1)];
	/* where a trim would cut (0: not trimmable): looked at before the lock, used if
	 * the queue says so; GSO super-packets are many packets, never trimmed */
	__u32 cut = 0;
	if (transport && k->trim && c->ps_per_byte && skb->gso_segs <= 1 &&
	    (c->trim_dscps >> (dscp & 63)) & 1)
		cut = trim_cut(skb, c, l3, iphl, proto, dport, ip_len, &roce);
	__u64 n = len - ip_len + cut;   /* the trimmed frame's length */

	bpf_spin_lock(&s->lock);
	/* `now` was read before the lock (no helper may run under it): a packet on the
	 * other CPU may have updated the queue at a later time meanwhile, and the backlog
	 * must not be read from a moment before that */
	if (now < s->t_last)
		now = s->t_last;
	else
		s->t_last = now;
	/* the queue does not drain while a downstream pause holds the port: the model runs
	 * on the port's own clock, which stands still while held */
	__u64 held = c->held_ns;
	if (c->hold_start && now > c->hold_start)
		held += now - c->hold_start;
	now = now > held ? now - held : 0;
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
		__u64 depth = 0, prio = 0;
		if (s->t_free > now)
			depth = (s->t_free - now) * 1000 / c->ps_per_byte;
		if (s->t_prio_free > now)
			prio = (s->t_prio_free - now) * 1000 / c->ps_per_byte;
		/* data's backlog: trimmed packets queue apart, ahead of it */
		__u64 data_depth = depth > prio ? depth - prio : 0;
		if (cut) {
			int over = k->trim_threshold != NO_THRESHOLD ?
				data_depth > k->trim_threshold : data_depth + len > c->depth;
			if (over) {
				if (prio + n > c->trim_depth) {
					s->dropped_trim++;
					verdict = TC_ACT_SHOT;
					goto out;
				}
				trim = 1;
				__u64 pstart = s->t_prio_free > now ? s->t_prio_free : now;
				s->t_prio_free = pstart + n * c->ps_per_byte / 1000;
				__u64 start = s->t_free > now ? s->t_free : now;
				s->t_free = start + n * c->ps_per_byte / 1000;
				depth += n;
				if (depth > s->max_depth)
					s->max_depth = depth;
				s->trimmed++;
				s->enqueued++;
				s->bytes += n;
				goto out;
			}
		}
		if (transport && data_depth + len > c->depth) {
			s->dropped_tail++;
			verdict = TC_ACT_SHOT;
			goto out;
		}
		if (transport && (ecn == 1 || ecn == 2)) {
			if (k->ecn && data_depth >= k->kmin) {
				if (data_depth >= k->kmax)
					mark = 1;
				else if (k->kmax > k->kmin) {
					__u64 p = (__u64)k->pmax * (data_depth - k->kmin) /
						  (k->kmax - k->kmin);
					mark = rnd2 < p;
				}
			}
		}
		__u64 start = s->t_free > now ? s->t_free : now;
		s->t_free = start + len * c->ps_per_byte / 1000;
		if (transport && k->lossless)
			departs = s->t_free;
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
	if (trim && do_trim(skb, c, l3, v4, iphl, proto, cut, roce)) {
		bpf_spin_lock(&s->lock);
		s->trim_failed++;     /* sent whole: counted, never silent */
		bpf_spin_unlock(&s->lock);
	}
	if (departs) {
		struct ingress_tab *in = bpf_map_lookup_elem(&emu_port_pfc, &key);
		if (in) {
			__u32 slot = skb->ingress_ifindex & (INGRESS_SLOTS - 1);
			__u32 prio = c->dscp_class[dscp & 63] & 7;
			in->ifindex[slot] = skb->ingress_ifindex;
			in->t_last[slot][prio] = departs;
		}
	}
	if (mark)
		set_ce(skb, v4, l3);
	return verdict;
}

char LICENSE[] SEC("license") = "GPL";
