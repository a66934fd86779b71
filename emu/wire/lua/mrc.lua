-- SPDX-License-Identifier: GPL-2.0-only
--
-- OCP Multipath Reliable Connection (MRC) dissector, shipped with emu.
--
-- MRC shares UDP port 4791 with RoCEv2 and is told apart by the BTH opcode
-- (emu's NIC daemons serve it on 4971, also registered below)
-- (0xC6-0xDE, the manufacturer-specific range). This script takes over the
-- udp.port 4791 entry, decodes MRC opcodes itself and hands every other packet
-- to the dissector that owned the port before (Wireshark's InfiniBand/RRoCE),
-- so RoCE decodes exactly as before. The ICRC is checked by roce.lua (a
-- post-dissector that covers MRC packets too).
--
-- All MRC layouts live in the LAYOUT table below. They are PROVISIONAL: they
-- mirror /work/shared/specs/mrc.md, itself two third-party reconstructions of
-- the MRC 1.0 spec. Correct them there, in one place.

-- A second load (plugin folder plus -X lua_script:) fails here and returns.
local proto_ok, mrc = pcall(Proto, "mrc", "Multipath Reliable Connection")
if not proto_ok then return end

-- Wireshark 4.0 embeds Lua 5.2, which has bit32; later Lua versions may not.
-- Then build the same functions from the native operators (compiled at run
-- time, so this file still parses under Lua 5.2).
local bit32 = rawget(_G, "bit32") or assert(load([[
    local M = 0xFFFFFFFF
    return { band = function(a, b) return a & b end, bor = function(a, b) return a | b end,
             bxor = function(a, b) return a ~ b end,
             lshift = function(a, n) return (a << n) & M end,
             rshift = function(a, n) return (a & M) >> n end }]]))()
local band, bor, rshift, lshift = bit32.band, bit32.bor, bit32.rshift, bit32.lshift
local fmt = string.format

---------------------------------------------------------------------------
-- PROVISIONAL wire layouts (specs/mrc.md). Field entry:
--   { name, offset, size, type, mask, value strings or base, label }
-- type: u8 u16 u24 u32 u64 i16 bool bytes. Field names are mrc.<header>.<name>.
---------------------------------------------------------------------------
local M_FIELD = { [0] = "NONE", "SKIP_ONCE", "ALWAYS_SKIP", "RESERVED" }
local NACK_REASONS = { [0x01] = "TRIMMED", [0x02] = "TRIMMED_LASTHOP", [0x06] = "NO_BITMAP",
    [0x07] = "NO_PKT_BUFFER", [0x0A] = "NO_RESOURCE", [0x0B] = "PSN_OOR_WINDOW",
    [0x19] = "UNEXP_EVENT" }
local ERTH_OPS = { [0] = "PORT_STATUS_UPDATE", "EV_PROBE", "RESERVED", "RESERVED" }
local EETH_STATUS = { [0] = "OK", "UNSUPPORTED_OP", "REJECTED", "NO_RESOURCE" }
local PORT_STATES = { [0] = "ABSENT", "UP", "DOWN", "DEGRADED" }
local CC_TYPES = { [0] = "NSCC", "Credit" }
local FTYPES = { [1] = "128 ns units" }

local LAYOUT = {
    wire_version = 1,   -- emu/wire/codec/mrc.py MRC_WIRE_VERSION: bump on any change
    udp_port = 4791,
    emu_port = 4971,    -- emu's NIC daemons serve MRC here (RoCEv2 keeps 4791)
    first_opcode = 0xC6, last_opcode = 0xDE,
    -- BTH byte 8 (the AckReq byte): MRC bits
    bth8 = { ackreq = 0x80, rtx = 0x20, ts = 0x10, rsvd = 0x4F },
    -- opcode -> name, headers after the BTH ("tseth?" = only when BTH.TS set),
    -- has_payload (write data follows the headers)
    opcodes = {
        [0xC6] = { "WRITE_FIRST", { "meth", "tseth?", "reth" }, true },
        [0xC7] = { "WRITE_MIDDLE", { "meth", "tseth?", "reth" }, true },
        [0xC8] = { "WRITE_LAST", { "meth", "tseth?", "reth" }, true },
        [0xC9] = { "WRITE_LAST_IMM", { "meth", "tseth?", "reth", "immdt" }, true },
        [0xCA] = { "WRITE_ONLY", { "meth", "tseth?", "reth" }, true },
        [0xCB] = { "WRITE_ONLY_IMM", { "meth", "tseth?", "reth", "immdt" }, true },
        [0xD1] = { "TRANSPORT_ACK", { "aeth" } },
        [0xD8] = { "ENDPOINT_REQUEST", { "erth" } },
        [0xD9] = { "ENDPOINT_RESPONSE", { "eeth" } },
        [0xDC] = { "RELIABILITY_SACK", { "seth", "cc_state" } },
        [0xDD] = { "RELIABILITY_NACK", { "neth" } },
        [0xDE] = { "RELIABILITY_PROBE", { "peth" } },
    },
    headers = {
        meth = { "Message Extended Transport Header", 4, {
            { "rqmsn", 0, 2, "u16", nil, base.DEC, "Request MSN" },
            { "msn", 2, 2, "u16", nil, base.DEC, "MSN" } } },
        tseth = { "Timestamp Extended Transport Header", 4, {
            { "tx_timestamp", 0, 2, "u16", nil, base.DEC, "TX timestamp" },
            { "tsr", 2, 2, "bool", 0x8000, nil, "TSR" },
            { "rsvd", 2, 2, "u16", 0x7FF0, base.HEX, "Reserved" },
            { "ftype", 2, 2, "u16", 0x000F, FTYPES, "Format type" } } },
        reth = { "RDMA Extended Transport Header", 16, {
            { "va", 0, 8, "u64", nil, base.HEX, "Virtual address" },
            { "r_key", 8, 4, "u32", nil, base.HEX, "Remote key" },
            { "dma_len", 12, 4, "u32", nil, base.DEC, "DMA length" } } },
        immdt = { "Immediate Data", 4, {
            { "data", 0, 4, "u32", nil, base.HEX, "Immediate data" } } },
        aeth = { "ACK Extended Transport Header", 4, {
            { "syndrome", 0, 1, "u8", nil, base.HEX, "Syndrome" },
            { "msn", 1, 3, "u24", nil, base.DEC, "MSN" } } },
        seth = { "SACK Extended Transport Header", 28, {
            { "flags", 0, 2, "u16", nil, base.HEX, "Flags" },
            { "m", 0, 2, "u16", 0x0060, M_FIELD, "M (ECN per EV)" },
            { "pr", 0, 2, "bool", 0x0002, nil, "PR (probe response)" },
            { "ack_psn_offset", 2, 2, "i16", nil, nil, "ACK PSN offset" },
            { "ev", 4, 4, "u32", nil, base.HEX, "EV (echo)" },
            { "spdcid", 8, 2, "u16", nil, base.HEX, "Source PDC ID" },
            { "dpdcid", 10, 2, "u16", nil, base.HEX, "Destination PDC ID" },
            { "rsvd", 12, 1, "u8", nil, base.HEX, "Reserved" },
            { "cack_psn", 13, 3, "u24", nil, base.HEX, "Cumulative ACK PSN" },
            { "cc_type", 16, 1, "u8", 0xF0, CC_TYPES, "CC type" },
            { "cc_flags", 16, 1, "u8", 0x0F, base.HEX, "CC flags" },
            { "mpr", 17, 1, "u8", nil, base.DEC, "MPR (x128 PSNs)" },
            { "sack_offset", 18, 2, "i16", nil, nil, "SACK offset" },
            { "sack_bitmap", 20, 8, "u64", nil, base.HEX, "SACK bitmap" } } },
        cc_state = { "Congestion Control State", 8, {
            { "tx_timestamp", 0, 2, "u16", nil, base.DEC, "TX timestamp (reflected)" },
            { "rsvd", 2, 2, "u16", 0x8000, base.HEX, "Reserved" },
            { "ooo_count", 2, 2, "u16", 0x7FFF, base.DEC, "Out-of-order count" },
            { "r_c", 4, 1, "bool", 0x80, nil, "Restore cwnd (R_C)" },
            { "rcv_cwnd_pen", 4, 1, "u8", 0x7F, base.DEC, "Receiver cwnd penalty" },
            { "rcvd_bytes", 5, 3, "u24", nil, base.DEC, "Received bytes (256 B units)" } } },
        neth = { "NACK Extended Transport Header", 20, {
            { "flags", 0, 2, "u16", nil, base.HEX, "Flags/reserved" },
            { "nack_reason", 2, 1, "u8", nil, NACK_REASONS, "NACK reason" },
            { "vendor_info", 3, 1, "u8", nil, base.HEX, "Vendor info" },
            { "ev", 4, 4, "u32", nil, base.HEX, "EV (echo)" },
            { "spdcid", 8, 2, "u16", nil, base.HEX, "Source PDC ID" },
            { "dpdcid", 10, 2, "u16", nil, base.HEX, "Destination PDC ID" },
            { "rsvd", 12, 1, "u8", nil, base.HEX, "Reserved" },
            { "nack_psn", 13, 3, "u24", nil, base.HEX, "NACK PSN" },
            { "cc_type", 16, 1, "u8", 0xF0, CC_TYPES, "CC type" },
            { "cc_flags", 16, 1, "u8", 0x0F, base.HEX, "CC flags" },
            { "rsvd2", 17, 1, "u8", nil, base.HEX, "Reserved" },
            { "tx_timestamp", 18, 2, "u16", nil, base.DEC, "TX timestamp" } } },
        peth = { "Probe Extended Transport Header", 16, {
            { "rsvd", 0, 3, "u24", nil, base.HEX, "Reserved" },
            { "vendor_info", 3, 1, "u8", nil, base.HEX, "Vendor info" },
            { "probe_id", 4, 2, "u16", nil, base.HEX, "Probe ID" },
            { "rsvd2", 6, 2, "u16", nil, base.HEX, "Reserved" },
            { "spdcid", 8, 2, "u16", nil, base.HEX, "Source PDC ID" },
            { "dpdcid", 10, 2, "u16", nil, base.HEX, "Destination PDC ID" },
            { "tx_timestamp", 12, 2, "u16", nil, base.DEC, "TX timestamp" },
            { "tsr", 14, 2, "bool", 0x8000, nil, "TSR" },
            { "rsvd3", 14, 2, "u16", 0x7FF0, base.HEX, "Reserved" },
            { "ftype", 14, 2, "u16", 0x000F, FTYPES, "Format type" } } },
        -- ERTH: the spec page gives "op in the low 2 bits of byte 1 · vendor_info ·
        -- port_status_mask u32 · rsvd u32 · tx_timestamp u16 · tsr/ftype u16" in
        -- 16 bytes; we read byte 2 as reserved and vendor_info as byte 3 (as in PETH).
        erth = { "Endpoint Request Transport Header", 16, {
            { "rsvd", 0, 2, "u16", 0xFFFC, base.HEX, "Reserved" },
            { "op", 0, 2, "u16", 0x0003, ERTH_OPS, "Operation" },
            { "rsvd2", 2, 1, "u8", nil, base.HEX, "Reserved" },
            { "vendor_info", 3, 1, "u8", nil, base.HEX, "Vendor info" },
            { "port_status_mask", 4, 4, "u32", nil, base.HEX, "Port status mask" },
            { "rsvd3", 8, 4, "u32", nil, base.HEX, "Reserved" },
            { "tx_timestamp", 12, 2, "u16", nil, base.DEC, "TX timestamp" },
            { "tsr", 14, 2, "bool", 0x8000, nil, "TSR" },
            { "rsvd4", 14, 2, "u16", 0x7FF0, base.HEX, "Reserved" },
            { "ftype", 14, 2, "u16", 0x000F, FTYPES, "Format type" } } },
        -- EETH: contents not public. emu's own layout (as emu/wire/codec/mrc.py):
        --   echo op, status, the request id and the EV the request came on,
        --   the responder's port mask, and 4 bits of state per port
        --   (port i in bits 4i+3..4i of the 128-bit port_states).
        eeth = { "Endpoint Response Transport Header (emu layout)", 36, {
            { "rsvd", 0, 2, "u16", 0xFFFC, base.HEX, "Reserved" },
            { "op", 0, 2, "u16", 0x0003, ERTH_OPS, "Operation (echo)" },
            { "status", 2, 1, "u8", nil, EETH_STATUS, "Status" },
            { "vendor_info", 3, 1, "u8", nil, base.HEX, "Vendor info" },
            { "request_id", 4, 2, "u16", nil, base.HEX, "Request ID (echo of BTH.PSN[15:0])" },
            { "num_ports", 6, 1, "u8", nil, base.DEC, "Number of ports" },
            { "rsvd2", 7, 1, "u8", nil, base.HEX, "Reserved" },
            { "port_status_mask", 8, 4, "u32", nil, base.HEX, "Port status mask (bit i = port i up)" },
            { "ev", 12, 4, "u32", nil, base.HEX, "EV of the request (echo)" },
            { "tx_timestamp", 16, 2, "u16", nil, base.DEC, "Request TX timestamp (reflected)" },
            { "rsvd3", 18, 2, "u16", nil, base.HEX, "Reserved" },
            { "port_states", 20, 16, "bytes", nil, nil, "Port states (4 bits per port)" } } },
    },
}

---------------------------------------------------------------------------
-- Fields
---------------------------------------------------------------------------
local OPCODE_NAMES = {}
for op, d in pairs(LAYOUT.opcodes) do OPCODE_NAMES[op] = d[1] end

local F = {}
local CTOR = { u8 = ProtoField.uint8, u16 = ProtoField.uint16, u24 = ProtoField.uint24,
    u32 = ProtoField.uint32, u64 = ProtoField.uint64, i16 = ProtoField.int16 }
local function make_field(abbr, e)
    local typ, mask, vs, label = e[4], e[5], e[6], e[7]
    if typ == "bool" then
        return ProtoField.bool(abbr, label, e[3] * 8, nil, mask)
    elseif typ == "bytes" then
        return ProtoField.bytes(abbr, label)
    elseif typ == "i16" then
        return ProtoField.int16(abbr, label)
    end
    local b, strings = base.DEC, nil
    if type(vs) == "table" then strings = vs elseif vs then b = vs end
    return CTOR[typ](abbr, label, b, strings, mask)
end
for key, h in pairs(LAYOUT.headers) do
    F[key] = ProtoField.bytes("mrc." .. key, h[1])
    for _, e in ipairs(h[3]) do F[key .. "." .. e[1]] = make_field("mrc." .. key .. "." .. e[1], e) end
end

local B = LAYOUT.bth8
F.bth = ProtoField.bytes("mrc.bth", "Base Transport Header")
F.opcode = ProtoField.uint8("mrc.bth.opcode", "Opcode", base.HEX, OPCODE_NAMES)
F.se = ProtoField.bool("mrc.bth.se", "Solicited event", 8, nil, 0x80)
F.m = ProtoField.bool("mrc.bth.m", "MigReq", 8, nil, 0x40)
F.padcnt = ProtoField.uint8("mrc.bth.padcnt", "Pad count", base.DEC, nil, 0x30)
F.tver = ProtoField.uint8("mrc.bth.tver", "Header version", base.DEC, nil, 0x0F)
F.p_key = ProtoField.uint16("mrc.bth.p_key", "Partition key", base.HEX)
F.fecn = ProtoField.bool("mrc.bth.fecn", "FECN", 8, nil, 0x80)
F.becn = ProtoField.bool("mrc.bth.becn", "BECN", 8, nil, 0x40)
F.rsvd6 = ProtoField.uint8("mrc.bth.reserved6", "Reserved", base.HEX, nil, 0x3F)
F.destqp = ProtoField.uint24("mrc.bth.destqp", "Destination QP", base.HEX)
F.ackreq = ProtoField.bool("mrc.bth.ackreq", "AckReq", 8, nil, B.ackreq)
F.rtx = ProtoField.bool("mrc.bth.rtx", "RTX (retransmission)", 8, nil, B.rtx)
F.ts = ProtoField.bool("mrc.bth.ts", "TS (TSETH present)", 8, nil, B.ts)
F.rsvd8 = ProtoField.uint8("mrc.bth.reserved8", "Reserved", base.HEX, nil, B.rsvd)
F.psn = ProtoField.uint24("mrc.bth.psn", "PSN", base.HEX)
-- derived (generated) fields
F.ev = ProtoField.uint32("mrc.ev", "Entropy value (EV)", base.HEX)
F.ack_psn = ProtoField.uint24("mrc.seth.ack_psn", "ACK PSN", base.HEX)
F.sack_base = ProtoField.uint24("mrc.seth.sack_base_psn", "SACK bitmap base PSN", base.HEX)
F.request_id = ProtoField.uint16("mrc.erth.request_id", "Request ID (BTH.PSN[15:0])", base.HEX)
F.pad = ProtoField.bytes("mrc.pad", "Pad")
F.wire_version = ProtoField.uint8("mrc.wire_version", "Layout version (provisional)")
F.port_state = ProtoField.uint8("mrc.eeth.port_state", "Port state", base.DEC, PORT_STATES)

local list = {}
for _, f in pairs(F) do list[#list + 1] = f end
mrc.fields = list

local E = {
    truncated = ProtoExpert.new("mrc.truncated", "MRC header truncated",
        expert.group.MALFORMED, expert.severity.ERROR),
    opcode = ProtoExpert.new("mrc.unknown_opcode", "Unknown MRC opcode",
        expert.group.MALFORMED, expert.severity.ERROR),
}
mrc.experts = { E.truncated, E.opcode }

---------------------------------------------------------------------------
-- Preferences
---------------------------------------------------------------------------
local EV_UDP, EV_STEV = 1, 2
mrc.prefs.ev_mode = Pref.enum("EV mode", EV_STEV,
    "Where the 32-bit entropy value lives: UDP source port only, or STEV (sport = EV[31:16], "
    .. "IPv6 flow label = EV[15:0])",
    { { "udp", "UDP source port", EV_UDP }, { "stev", "UDP source port + IPv6 flow label", EV_STEV } },
    false)
mrc.prefs.udp_port = Pref.uint("UDP port", LAYOUT.udp_port, "UDP destination port of MRC/RoCEv2")

---------------------------------------------------------------------------
-- Dissection
---------------------------------------------------------------------------
local f_flow = Field.new("ipv6.flow")
local data_dissector = Dissector.get("data")
local previous = {}   -- port -> dissector that owned it before us
local current = 0     -- the port we are registered on

local function last(extractor)
    local all = { extractor() }
    return all[#all]
end

-- The 32-bit EV of this packet, and a note on how it was derived.
local function entropy_value(pinfo)
    local sport = pinfo.src_port
    if mrc.prefs.ev_mode == EV_UDP then return sport, "UDP source port" end
    local flow = last(f_flow)
    if not flow then return sport, "IPv4: UDP source port only" end
    return bor(lshift(sport, 16), band(flow.value, 0xFFFF)), "STEV: sport << 16 | flow label"
end

local function add_header(tree, tvb, off, key)
    local h = LAYOUT.headers[key]
    local size = h[2]
    local have = tvb:len() - off
    if have < size then
        -- a zero-length range at the very end is out of bounds: use the parent
        local item = have > 0 and tree:add(F[key], tvb(off, have)) or tree
        item:add_proto_expert_info(E.truncated, fmt("%s: need %d bytes, have %d", h[1], size,
            math.max(have, 0)))
        return nil
    end
    local item = tree:add(F[key], tvb(off, size))
    item:set_text(h[1])
    for _, e in ipairs(h[3]) do item:add(F[key .. "." .. e[1]], tvb(off + e[2], e[3])) end
    return item
end

-- Info-column text for a header, and generated fields that need context.
local function summarize(key, item, tvb, off, ctx)
    if key == "meth" then
        return fmt("MSN=%d", tvb(off + 2, 2):uint())
    elseif key == "reth" then
        return fmt("VA=0x%s len=%d", tvb(off, 8):uint64():tohex(), tvb(off + 12, 4):uint())
    elseif key == "aeth" then
        return fmt("syndrome=0x%02x MSN=%d", tvb(off, 1):uint(), tvb(off + 1, 3):uint())
    elseif key == "seth" then
        local cack = tvb(off + 13, 3):uint()
        item:add(F.ack_psn, tvb(off + 2, 2), band(cack + tvb(off + 2, 2):int(), 0xFFFFFF))
            :set_generated()
        item:add(F.sack_base, tvb(off + 18, 2), band(cack + tvb(off + 18, 2):int(), 0xFFFFFF))
            :set_generated()
        local flags = tvb(off, 2):uint()
        local m = rshift(band(flags, 0x60), 5)
        return fmt("CACK=0x%06x EV=0x%08x M=%s%s", cack, tvb(off + 4, 4):uint(), M_FIELD[m],
            band(flags, 0x02) ~= 0 and " [PR]" or "")
    elseif key == "neth" then
        local reason = tvb(off + 2, 1):uint()
        return fmt("%s NACK_PSN=0x%06x EV=0x%08x", NACK_REASONS[reason] or
            fmt("reason=0x%02x", reason), tvb(off + 13, 3):uint(), tvb(off + 4, 4):uint())
    elseif key == "peth" then
        return fmt("probe_id=0x%04x", tvb(off + 4, 2):uint())
    elseif key == "erth" then
        item:add(F.request_id, ctx.psn_range, band(ctx.psn, 0xFFFF)):set_generated()
        return fmt("%s req_id=0x%04x mask=0x%08x", ERTH_OPS[band(tvb(off, 2):uint(), 3)],
            band(ctx.psn, 0xFFFF), tvb(off + 4, 4):uint())
    elseif key == "eeth" then
        -- one item per reported port: port i sits in bits 4i+3..4i of the 16 bytes
        local ports = math.min(tvb(off + 6, 1):uint(), 32)
        for i = 0, ports - 1 do
            local b = off + 35 - math.floor(i / 2)
            local v = band(rshift(tvb(b, 1):uint(), (i % 2) * 4), 0x0F)
            item:add(F.port_state, tvb(b, 1), v):prepend_text(fmt("Port %d: ", i))
        end
        local status = tvb(off + 2, 1):uint()
        return fmt("%s %s req_id=0x%04x", ERTH_OPS[band(tvb(off, 2):uint(), 3)],
            EETH_STATUS[status] or fmt("status=%d", status), tvb(off + 4, 2):uint())
    end
    return nil
end

local function dissect_bth(tvb, tree)
    local bth = tree:add(F.bth, tvb(0, 12))
    bth:add(F.opcode, tvb(0, 1))
    for _, f in ipairs({ F.se, F.m, F.padcnt, F.tver }) do bth:add(f, tvb(1, 1)) end
    bth:add(F.p_key, tvb(2, 2))
    for _, f in ipairs({ F.fecn, F.becn, F.rsvd6 }) do bth:add(f, tvb(4, 1)) end
    bth:add(F.destqp, tvb(5, 3))
    for _, f in ipairs({ F.ackreq, F.rtx, F.ts, F.rsvd8 }) do bth:add(f, tvb(8, 1)) end
    bth:add(F.psn, tvb(9, 3))
    local b8 = tvb(8, 1):uint()
    local names = {}
    if band(b8, B.ackreq) ~= 0 then names[#names + 1] = "AckReq" end
    if band(b8, B.rtx) ~= 0 then names[#names + 1] = "RTX" end
    if band(tvb(4, 1):uint(), 0x80) ~= 0 then names[#names + 1] = "FECN" end
    return names, band(b8, B.ts) ~= 0
end

local function dissect_mrc(tvb, pinfo, tree, opcode)
    pinfo.cols.protocol:set("MRC")
    local top = tree:add(mrc, tvb())
    top:add(F.wire_version, tvb(0, 0), LAYOUT.wire_version):set_generated()
    local ev, how = entropy_value(pinfo)
    top:add(F.ev, tvb(0, 0), ev):append_text(" (" .. how .. ")"):set_generated()
    local d = LAYOUT.opcodes[opcode]
    local name = d and d[1] or fmt("opcode 0x%02x", opcode)
    if tvb:len() < 12 + 4 then
        top:add_proto_expert_info(E.truncated, fmt("BTH and ICRC: need 16 bytes, have %d",
            tvb:len()))
        pinfo.cols.info:set("MRC " .. name .. " [truncated]")
        return tvb:len()
    end
    local flags, ts = dissect_bth(tvb, top)
    local psn = tvb(9, 3):uint()
    local info = { name, fmt("QP=0x%06x PSN=0x%06x", tvb(5, 3):uint(), psn) }
    if #flags > 0 then info[#info + 1] = "[" .. table.concat(flags, " ") .. "]" end
    if not d then
        top:add_proto_expert_info(E.opcode, fmt("Opcode 0x%02x is in the MRC range but not "
            .. "defined", opcode))
        pinfo.cols.info:set("MRC " .. table.concat(info, " "))
        return tvb:len()
    end
    -- headers; the ICRC (last 4 bytes) is checked by roce.lua
    local off, ok = 12, true
    local ctx = { psn = psn, psn_range = tvb(9, 3) }
    local limit = tvb:len() - 4
    local sub = tvb(0, limit):tvb()
    for _, key in ipairs(d[2]) do
        local optional = key:sub(-1) == "?"
        if optional then key = key:sub(1, -2) end
        if not optional or ts then
            local item = add_header(top, sub, off, key)
            if not item then ok = false; break end
            local text = summarize(key, item, tvb, off, ctx)
            if text then info[#info + 1] = text end
            off = off + LAYOUT.headers[key][2]
        end
    end
    if ok and limit - off > 0 then
        local padcnt = rshift(band(tvb(1, 1):uint(), 0x30), 4)
        local pay = limit - off
        if d[3] and padcnt > 0 and padcnt <= pay then pay = pay - padcnt end
        data_dissector:call(tvb(off, pay):tvb(), pinfo, tree)
        if pay < limit - off then top:add(F.pad, tvb(off + pay, limit - off - pay)) end
    end
    top:append_text(", " .. name)
    pinfo.cols.info:set("MRC " .. table.concat(info, " "))
    return tvb:len()
end

function mrc.dissector(tvb, pinfo, tree)
    local opcode = tvb:len() > 0 and tvb(0, 1):uint() or -1
    if opcode >= LAYOUT.first_opcode and opcode <= LAYOUT.last_opcode then
        return dissect_mrc(tvb, pinfo, tree, opcode)
    end
    local other = previous[current]
    if not other then return data_dissector:call(tvb, pinfo, tree) end
    -- A malformed RoCE packet makes the InfiniBand dissector throw; Wireshark has
    -- then already marked it "[Malformed Packet]", and Dissector:call turns the
    -- exception into a Lua error, which must not surface as one.
    local ok, consumed = pcall(other.call, other, tvb, pinfo, tree)
    return ok and consumed or tvb:len()
end

---------------------------------------------------------------------------
-- Registration: take the port over, remembering its previous owner.
---------------------------------------------------------------------------
local udp_table = DissectorTable.get("udp.port")
local function register()
    local port = mrc.prefs.udp_port
    if port == current then return end
    if current ~= 0 then
        udp_table:remove(current, mrc)
        if previous[current] then udp_table:add(current, previous[current]) end
    end
    previous[port] = udp_table:get_dissector(port)
    udp_table:add(port, mrc)
    current = port
end
mrc.prefs_changed = register
register()
-- and on emu's own MRC port, where every packet is MRC's or nobody's
if LAYOUT.emu_port ~= LAYOUT.udp_port then udp_table:add(LAYOUT.emu_port, mrc) end
