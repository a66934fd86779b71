-- SPDX-License-Identifier: GPL-2.0-only
--
-- RoCEv2 post-dissector, shipped with emu: verifies the invariant CRC (ICRC)
-- of every UDP/4791 packet (RoCEv2 and MRC, IPv4 or IPv6) and labels CNPs.
-- Wireshark 4.0 decodes RoCEv2 as "RRoCE" but checks no ICRC and shows a CNP
-- (opcode 0x81) as an unknown opcode.
--
-- ICRC rule (/work/shared/specs/rocev2.md, same as emu/wire/icrc.py):
--   CRC-32 (reflected polynomial 0xEDB88320, init 0xFFFFFFFF, final xor) over
--     8 x 0xFF (stand-in for the InfiniBand LRH)
--   + the IP header with the variant fields set to all-ones
--       IPv4: TOS, TTL, header checksum (options included, per IHL)
--       IPv6: traffic class, flow label, hop limit (fixed 40-byte header only)
--   + the UDP header with the checksum set to all-ones
--   + the BTH with byte 4 (FECN, BECN, reserved) set to all-ones
--   + the rest of the UDP payload up to the ICRC,
--   stored little-endian in the last 4 bytes of the UDP payload.
-- With tunnels (e.g. outer IPv6 + SRH around an inner IPv6/UDP/BTH, as MRC's
-- SRv6 mode uses) the innermost IP header before the UDP header counts.
--
-- Fields: roce.icrc (the wire value, read little-endian), roce.icrc_calc,
-- roce.icrc_ok, roce.cnp, roce.cnp.dest_qp.

local proto_ok, roce = pcall(Proto, "roce", "RoCEv2 ICRC check (emu)")
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
local band, bxor, rshift = bit32.band, bit32.bxor, bit32.rshift
local byte, char, fmt = string.byte, string.char, string.format

---------------------------------------------------------------------------
-- CRC-32 (zlib/Ethernet), table driven
---------------------------------------------------------------------------
local CRC_TABLE = {}
for i = 0, 255 do
    local c = i
    for _ = 1, 8 do
        if band(c, 1) == 1 then c = bxor(rshift(c, 1), 0xEDB88320) else c = rshift(c, 1) end
    end
    CRC_TABLE[i] = c
end

-- Continue a CRC over the Lua string `s`; `crc` is the internal (pre-xor) state.
local function crc32_update(crc, s)
    local n = #s
    local i = 1
    -- eight bytes per string.byte call: fewer C calls in the hot loop
    while i + 7 <= n do
        local b1, b2, b3, b4, b5, b6, b7, b8 = byte(s, i, i + 7)
        crc = bxor(rshift(crc, 8), CRC_TABLE[band(bxor(crc, b1), 0xFF)])
        crc = bxor(rshift(crc, 8), CRC_TABLE[band(bxor(crc, b2), 0xFF)])
        crc = bxor(rshift(crc, 8), CRC_TABLE[band(bxor(crc, b3), 0xFF)])
        crc = bxor(rshift(crc, 8), CRC_TABLE[band(bxor(crc, b4), 0xFF)])
        crc = bxor(rshift(crc, 8), CRC_TABLE[band(bxor(crc, b5), 0xFF)])
        crc = bxor(rshift(crc, 8), CRC_TABLE[band(bxor(crc, b6), 0xFF)])
        crc = bxor(rshift(crc, 8), CRC_TABLE[band(bxor(crc, b7), 0xFF)])
        crc = bxor(rshift(crc, 8), CRC_TABLE[band(bxor(crc, b8), 0xFF)])
        i = i + 8
    end
    for j = i, n do
        crc = bxor(rshift(crc, 8), CRC_TABLE[band(bxor(crc, byte(s, j)), 0xFF)])
    end
    return crc
end

-- State after the 8-byte LRH stand-in, computed once.
local CRC_AFTER_LRH = crc32_update(0xFFFFFFFF, string.rep("\255", 8))

-- Copy of string `s` with the 1-based byte positions in `positions` set to 0xFF.
local function mask_bytes(s, positions)
    local bytes = { byte(s, 1, #s) }
    for _, p in ipairs(positions) do bytes[p] = 0xFF end
    return char(table.unpack(bytes))
end

---------------------------------------------------------------------------
-- Fields, expert info, preferences
---------------------------------------------------------------------------
local F = {
    icrc = ProtoField.uint32("roce.icrc", "ICRC (wire, little-endian)", base.HEX),
    icrc_calc = ProtoField.uint32("roce.icrc_calc", "ICRC (calculated)", base.HEX),
    icrc_ok = ProtoField.bool("roce.icrc_ok", "ICRC correct"),
    cnp = ProtoField.bool("roce.cnp", "Congestion Notification Packet (CNP)"),
    cnp_qp = ProtoField.uint24("roce.cnp.dest_qp", "CNP destination QP", base.HEX),
}
roce.fields = { F.icrc, F.icrc_calc, F.icrc_ok, F.cnp, F.cnp_qp }

local E = {
    bad = ProtoExpert.new("roce.icrc.bad", "ICRC mismatch", expert.group.CHECKSUM,
        expert.severity.ERROR),
    short = ProtoExpert.new("roce.too_short", "UDP payload too short for BTH and ICRC",
        expert.group.MALFORMED, expert.severity.ERROR),
    cut = ProtoExpert.new("roce.icrc.unverified", "ICRC not verified: frame cut short by capture",
        expert.group.CHECKSUM, expert.severity.WARN),
}
roce.experts = { E.bad, E.short, E.cut }

roce.prefs.udp_port = Pref.uint("UDP port", 4791, "UDP destination port of RoCEv2 (and MRC)")
-- emu's NIC daemons serve MRC on a port of its own (RoCEv2's frames, the same ICRC)
local MRC_EMU_PORT = 4971

local f_udp_dport = Field.new("udp.dstport")
local f_udp_len = Field.new("udp.length")
local f_ip_version = Field.new("ip.version")
local f_ipv6_version = Field.new("ipv6.version")
local f_icmp = Field.new("icmp.type")
local f_icmpv6 = Field.new("icmpv6.type")

---------------------------------------------------------------------------
-- Locating the headers
---------------------------------------------------------------------------
local function all(extractor) return { extractor() } end

-- The innermost UDP header whose destination port is ours (or emu's MRC port): its
-- offset in the data source and the UDP length field, or nil.
local function find_udp(port)
    local dports, lens = all(f_udp_dport), all(f_udp_len)
    for i = #dports, 1, -1 do
        if dports[i].value == port or dports[i].value == MRC_EMU_PORT then
            local len_fi = lens[i]
            return dports[i].offset - 2, len_fi and len_fi.value, dports[i].source
        end
    end
    return nil
end

-- The innermost IP header that starts before `udp_off`: its offset, or nil.
-- (The IPv6 dissector adds ip.version too, so the version comes from the byte.)
local function find_ip(udp_off)
    local best = nil
    for _, extractor in ipairs({ f_ip_version, f_ipv6_version }) do
        for _, fi in ipairs(all(extractor)) do
            if fi.offset < udp_off and (not best or fi.offset > best) then best = fi.offset end
        end
    end
    return best
end

-- Masked IP header (through the end of the IPv4 header / the fixed IPv6 header).
local function masked_ip(tvb, ip_off, version)
    if version == 4 then
        local ihl = band(tvb(ip_off, 1):uint(), 0x0F) * 4
        return mask_bytes(tvb:raw(ip_off, ihl), { 2, 9, 11, 12 })
    end
    local s = tvb:raw(ip_off, 40)
    -- keep the version nibble, set traffic class and flow label to ones
    return char(band(byte(s, 1), 0xF0) + 0x0F) .. "\255\255\255" .. s:sub(5, 7) .. "\255"
        .. s:sub(9)
end

---------------------------------------------------------------------------
-- Post-dissector
---------------------------------------------------------------------------
-- True when an ICMP header precedes `udp_off`: the UDP header is quoted in an
-- ICMP error, and the quote is usually cut short.
local function inside_icmp(udp_off)
    for _, extractor in ipairs({ f_icmp, f_icmpv6 }) do
        for _, fi in ipairs(all(extractor)) do
            if fi.offset < udp_off then return true end
        end
    end
    return false
end

function roce.dissector(frame_tvb, pinfo, tree)
    local udp_off, udp_len, source = find_udp(roce.prefs.udp_port)
    if not udp_off or not udp_len or inside_icmp(udp_off) then return end
    local tvb = source or frame_tvb
    local ip_off = find_ip(udp_off)
    if not ip_off then return end
    local version = rshift(tvb(ip_off, 1):uint(), 4)
    if version ~= 4 and version ~= 6 then return end
    local top = tree:add(roce, tvb(udp_off, 0))
    local bth = udp_off + 8
    local icrc_off = udp_off + udp_len - 4
    if udp_len < 8 + 12 + 4 then
        top:add_proto_expert_info(E.short, fmt("UDP length %d < 24", udp_len))
        return
    end
    if icrc_off + 4 > tvb:len() then
        top:add_proto_expert_info(E.cut)
        return
    end
    -- CNP: opcode 0x81
    local opcode = tvb(bth, 1):uint()
    if opcode == 0x81 then
        local qp = tvb(bth + 5, 3):uint()
        top:add(F.cnp, tvb(bth, 1), true)
        top:add(F.cnp_qp, tvb(bth + 5, 3))
        pinfo.cols.info:set(fmt("CNP QP=0x%06x", qp))
    end
    -- ICRC over masked IP + UDP + BTH, then the rest
    local ip_hdr = masked_ip(tvb, ip_off, version)
    local udp_hdr = tvb:raw(udp_off, 6) .. "\255\255"
    local bth_hdr = mask_bytes(tvb:raw(bth, 12), { 5 })
    local crc = crc32_update(CRC_AFTER_LRH, ip_hdr .. udp_hdr .. bth_hdr)
    crc = crc32_update(crc, tvb:raw(bth + 12, icrc_off - bth - 12))
    local calc = bxor(crc, 0xFFFFFFFF)
    local wire = tvb(icrc_off, 4):le_uint()
    local ok = (calc == wire)
    local item = top:add_le(F.icrc, tvb(icrc_off, 4))
    top:add(F.icrc_calc, tvb(icrc_off, 4), calc):set_generated()
    top:add(F.icrc_ok, tvb(icrc_off, 4), ok):set_generated()
    if ok then
        top:append_text(fmt(", ICRC 0x%08x correct", wire))
    else
        top:append_text(fmt(", ICRC 0x%08x incorrect, should be 0x%08x", wire, calc))
        item:add_proto_expert_info(E.bad, fmt("ICRC mismatch: wire 0x%08x, calculated 0x%08x",
            wire, calc))
    end
end

register_postdissector(roce)
