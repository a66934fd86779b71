-- SPDX-License-Identifier: GPL-2.0-only
--
-- Ultra Ethernet Transport (UET) dissector for Wireshark < 5.0, shipped with emu.
--
-- Wireshark 5.0 (4.7 development series) has a built-in UET dissector. This
-- script uses the same display-filter field names (uet.pds.type, uet.pds.psn,
-- uet.ses.std.opcode, ...) so filters written against one work with the other;
-- fields the built-in dissector lacks use names in the same style. When the
-- built-in dissector is present the script does nothing.
--
-- Layout reference: /work/shared/specs/uet.md (the UE 1.0.1 spec is not public
-- to us). Where sources disagree the default follows Wireshark's layout and a
-- preference selects the alternative:
--   * SYN pdc_info: use_rsv_pdc bit 15 (Wireshark, xdp2) or bit 12 (uet-ref-prov).
--   * Small response with data (next_hdr 6): Wireshark decodes 4 bytes
--       0 list:2|opcode:6 · 1 ver:2|return_code:6 · 2 rsvd:2|payload_length:14
--     another public header file has 12 bytes: the same 4, then
--       4 rsvd u8 · 5 job_id u24 · 8 original_request_psn u32.
--     Default: 4 bytes (Wireshark); preference "rsp_data_small" = 12.
--   * MSWAP (atomic opcode 0x13) with the 36-byte compare-and-swap extension:
--     Wireshark uses it only for CSWAP..CSWAP_GT (0x0D-0x12); preference.
--
-- Known differences from Wireshark's decoder (on purpose, we follow specs/uet.md):
--   * TSS is type:5|SP:1|rsvd:1|AN:1|SDI:24, [SSI u32 if SP], TSC u64 (12/16 B).
--   * ACK_CC NSCC cc_state: restore_cwnd/rcv_cwnd_pend sit in byte 2 (not 0).
--   * Medium request: fields after request_length start at byte 4 (Wireshark
--     skips one byte too many there).
--   * TSEND_ATOMIC (0x0D) also carries an atomic extension header.

-- Quietly step aside when Wireshark already dissects UET (or the script was
-- loaded twice, e.g. from the plugin folder and with -X lua_script:).
do
    local ok, existing = pcall(Dissector.get, "uet")
    if ok and existing then return end
end
local proto_ok, uet = pcall(Proto, "uet", "Ultra Ethernet Transport")
if not proto_ok then return end

-- Second protocol object only to hang the native-IP (ip.proto) entry on; every
-- field it shows belongs to "uet".
local uet_ip = Proto("uet_ip", "Ultra Ethernet Transport over IP")

-- Wireshark 4.0 embeds Lua 5.2, which has bit32; later Lua versions may not.
-- Then build the same functions from the native operators (compiled at run
-- time, so this file still parses under Lua 5.2).
local bit32 = rawget(_G, "bit32") or assert(load([[
    local M = 0xFFFFFFFF
    return { band = function(a, b) return a & b end, bor = function(a, b) return a | b end,
             bxor = function(a, b) return a ~ b end,
             lshift = function(a, n) return (a << n) & M end,
             rshift = function(a, n) return (a & M) >> n end }]]))()
local band, rshift, lshift = bit32.band, bit32.rshift, bit32.lshift
local fmt = string.format

---------------------------------------------------------------------------
-- Value tables
---------------------------------------------------------------------------
-- PDS types: tree text, Info text, header size, dissector kind.
local PDS = {
    [1]  = { "Encryption Header (TSS)", "TSS", 0, "tss" },
    [2]  = { "RUD Request", "RUD_REQ", 12, "req" },
    [3]  = { "ROD Request", "ROD_REQ", 12, "req" },
    [4]  = { "RUDI Request", "RUDI_REQ", 8, "rudi" },
    [5]  = { "RUDI Response", "RUDI_RESP", 8, "rudi" },
    [6]  = { "UUD Request", "UUD_REQ", 4, "uud" },
    [7]  = { "ACK", "ACK", 12, "ack" },
    [8]  = { "ACK CC", "ACK_CC", 32, "ack" },
    [9]  = { "ACK CCX", "ACK_CCX", 40, "ack" },
    [10] = { "NACK", "NACK", 16, "nack" },
    [11] = { "Control", "CP", 16, "cp" },
    [12] = { "NACK CCX", "NACK_CCX", 32, "nack" },
    [13] = { "RUD CC Request", "RUD_CC_REQ", 16, "req" },
    [14] = { "ROD CC Request", "ROD_CC_REQ", 16, "req" },
}
local pds_type_vs = {}
for k, v in pairs(PDS) do pds_type_vs[k] = v[1] end

local NH_NAMES = { [0] = "NO SES", "SES REQUEST SMALL", "SES REQUEST MEDIUM", "SES REQUEST STD",
    "SES RESPONSE", "SES RESPONSE DATA", "SES RESPONSE DATA_SMALL" }

local CTL_TYPES = { [0] = "NOOP", "ACK_REQ", "CLEAR", "CLEAR_REQ", "CLOSE", "CLOSE_REQ",
    "PROBE", "CREDIT", "CREDIT_REQ" }
-- what the CP payload word means for each control type
local CTL_PAYLOAD = { [0] = "null", "message ID or 0", "clear PSN", "clear PSN", "null", "null",
    "SACK bitmap base PSN", "credit allocation", "credit request" }

local NACK_CODES = {
    [0x01] = "TRIMMED", [0x02] = "TRIMMED_LASTHOP", [0x03] = "TRIMMED_ACK",
    [0x04] = "NO_PDC_AVAIL", [0x05] = "NO_CCC_AVAIL", [0x06] = "NO_BITMAP",
    [0x07] = "NO_PKT_BUFFER", [0x08] = "NO_GTD_DEL_AVAIL", [0x09] = "NO_SES_MSG_AVAIL",
    [0x0A] = "NO_RESOURCE", [0x0B] = "PSN_OOR_WINDOW", [0x0D] = "ROD_OOO",
    [0x0E] = "INV_DPDCID", [0x0F] = "PDC_HDR_MISMATCH", [0x10] = "CLOSING",
    [0x11] = "CLOSING_IN_ERR", [0x12] = "PKT_NOT_RCVD", [0x13] = "GTD_RESP_UNAVAIL",
    [0x14] = "ACK_WITH_DATA", [0x15] = "INVALID_SYN", [0x16] = "PDC_MODE_MISMATCH",
    [0x17] = "NEW_START_PSN", [0x18] = "RCVD_SES_PROCG", [0x19] = "UNEXP_EVENT",
    [0x1A] = "RCVR_INFER_LOSS", [0xFD] = "EXP_NACK_NORMAL", [0xFE] = "EXP_NACK_ERR",
    [0xFF] = "EXP_NACK_FATAL",
}

local ACK_REQ = { [0] = "No Request", "Clear PSN", "Close PDC", "Reserved" }
local CC_TYPES = { [0] = "NSCC", "Credit" }

local SES_OPCODES = { [0] = "NO_OP", "WRITE", "READ", "ATOMIC", "FETCHING_ATOMIC", "SEND",
    "RENDEZVOUS_SEND", "DATAGRAM_SEND", "DEFERRABLE_SEND", "TAGGED_SEND", "RENDEZVOUS_TSEND",
    "DEFERRABLE_TSEND", "DEFERRABLE_RTR", "TSEND_ATOMIC", "TSEND_FETCH_ATOMIC", "MSG_ERROR" }
local ses_opcode_vs = {}
for k, v in pairs(SES_OPCODES) do ses_opcode_vs[k] = "UET_" .. v end

-- request opcodes followed by an atomic extension header
local ATOMIC_OPCODES = { [0x03] = true, [0x04] = true, [0x0D] = true, [0x0E] = true }
-- request opcodes followed by a rendezvous extension header (standard request only)
local RENDEZVOUS_OPCODES = { [0x06] = true, [0x0A] = true }

local AMO_OPCODES = { [0] = "MIN", "MAX", "SUM", "DIFF", "PROD", "LOR", "LAND", "BOR", "BAND",
    "LXOR", "BXOR", "READ", "WRITE", "CSWAP", "CSWAP_NE", "CSWAP_LE", "CSWAP_LT", "CSWAP_GE",
    "CSWAP_GT", "MSWAP" }
local AMO_MSWAP = 0x13
-- UET's own numbering (libfabric's fi_op plus DIFF at 3): CSWAP..CSWAP_GT
local function amo_is_cswap(op) return op >= 0x0D and op <= 0x12 end

local AMO_TYPES = { [0] = "INT8", "UINT8", "INT16", "UINT16", "INT32", "UINT32", "INT64",
    "UINT64", "INT128", "UINT128", "FLOAT", "DOUBLE", "FLOAT_COMPLEX", "DOUBLE_COMPLEX",
    "LONG_DOUBLE", "LONG_DOUBLE_COMPLEX", "BF16", "FP16" }
local SEM_CTL = { [0] = "None", "Cacheable", "CPU coherent", "Cacheable, CPU coherent" }

local RSP_OPCODES = { [0] = "Default Response", "Response", "Response With Data", "No Response" }
local RSP_INFO = { [0] = "DEFAULT_RESPONSE", "RESPONSE", "RESPONSE_W_DATA", "NO_RESPONSE" }
local RETURN_CODES = { [0] = "NULL", "OK", "BAD_GENERATION", "DISABLED", "DISABLED_GEN",
    "NO_MATCH", "UNSUPPORTED_OP", "UNSUPPORTED_SIZE", "AT_INVALID", "AT_PERM", "AT_ATS_ERROR",
    "AT_NO_TRANS", "AT_OUT_OF_RANGE", "HOST_POISONED", "HOST_UNSUCCESS_CMPL",
    "AMO_UNSUPPORTED_OP", "AMO_UNSUPPORTED_DT", "AMO_UNSUPPORTED_SIZE", "AMO_UNALIGNED",
    "AMO_FP_NAN", "AMO_FP_UNDERFLOW", "AMO_FP_OVERFLOW", "AMO_FP_INEXACT", "PERM_VIOLATION",
    "OP_VIOLATION", "BAD_INDEX", "BAD_PID", "BAD_JOB_ID", "BAD_MKEY", "BAD_ADDR", "CANCELLED",
    "UNDELIVERABLE", "UNCOR", "UNCOR_TRNSNT", "TOO_LONG", "INITIATOR_ERR", "DROPPED" }

local REL_TFS = { "Relative Addressing", "Absolute Addressing" }

---------------------------------------------------------------------------
-- Preferences
---------------------------------------------------------------------------
local RSV_BIT_W, RSV_BIT_R = 15, 12
uet.prefs.udp_port = Pref.uint("UDP port", 4793, "UDP destination port of UET")
uet.prefs.ip_proto = Pref.uint("IP protocol number", 253,
    "IP protocol number of native-IP UET (entropy header first); 0 disables")
uet.prefs.ip_crc_trailer = Pref.bool("Native IP: CRC32C trailer", false,
    "Native-IP packets without TSS end in a 4-byte CRC32C trailer (uet-ref-prov)")
uet.prefs.use_rsv_bit = Pref.enum("SYN pdc_info use_rsv_pdc bit", RSV_BIT_W,
    "Bit of the 16-bit SYN word that carries use_rsv_pdc",
    { { "w", "bit 15 (Wireshark, xdp2)", RSV_BIT_W }, { "r", "bit 12 (uet-ref-prov)", RSV_BIT_R } },
    false)
uet.prefs.rsp_data_small = Pref.enum("Small response with data size", 4,
    "Layout of the SES small response with data header (next header 6)",
    { { "4", "4 bytes (Wireshark)", 4 }, { "12", "12 bytes (+job_id, original request PSN)", 12 } },
    false)
uet.prefs.mswap_cswap = Pref.bool("MSWAP uses compare-and-swap ext", false,
    "Atomic opcode MSWAP (0x13) carries the 36-byte compare-and-swap extension")

---------------------------------------------------------------------------
-- Fields (names as in Wireshark's packet-uet.c where it has the field)
---------------------------------------------------------------------------
local F = {}
local function field(key, ctor, abbr, ...)
    F[key] = ctor("uet." .. abbr, ...)
end
local U8, U16, U24, U32, U64 = ProtoField.uint8, ProtoField.uint16, ProtoField.uint24,
    ProtoField.uint32, ProtoField.uint64
local BOOL, BYTES, I16 = ProtoField.bool, ProtoField.bytes, ProtoField.int16
local DEC, HEX, DEC_HEX = base.DEC, base.HEX, base.DEC_HEX

-- encapsulation
field("entropy", U16, "pds.entropy", "Entropy", DEC_HEX)
field("entropy_rsvd", U16, "pds.entropy.rsvd", "Reserved (entropy)", HEX)
field("crc32c", U32, "crc32c", "CRC32C trailer", HEX)
-- TSS
field("tss", BYTES, "tss", "TSS")
field("tss_type", U8, "tss.type", "Type", DEC, pds_type_vs, 0xF8)
field("tss_sp", BOOL, "tss.sp", "SP (SSI present)", 8, nil, 0x04)
field("tss_rsvd", U8, "tss.reserved", "Reserved", HEX, nil, 0x02)
field("tss_an", BOOL, "tss.an", "AN (association number)", 8, nil, 0x01)
field("tss_sdi", U24, "tss.sdi", "SDI", DEC_HEX)
field("tss_ssi", U32, "tss.ssi", "SSI", DEC_HEX)
field("tss_tsc", U64, "tss.tsc", "TSC", HEX)
field("tss_ciphertext", BYTES, "tss.ciphertext", "Encrypted PDS/SES/payload")
field("tss_icv", BYTES, "tss.icv", "ICV")
-- PDS prologue and flags
field("pds", BYTES, "pds", "PDS Layer")
field("pds_type", U16, "pds.type", "Type", DEC, pds_type_vs, 0xF800)
field("pds_nh", U16, "pds.nh", "Next Hdr", DEC, NH_NAMES, 0x0780)
field("pds_ctl_type", U16, "pds.ctl_type", "Ctl Type", DEC, CTL_TYPES, 0x0780)
field("flags", U16, "pds.flags", "Flags", HEX, nil, 0x007F)
field("f_m", BOOL, "pds.flags.m", "ECN Marked (M)", 16, nil, 0x0020)
field("f_isrod", BOOL, "pds.flags.isrod", "ROD PDC (ISROD)", 16, nil, 0x0020)
field("f_retx", BOOL, "pds.flags.retx", "Retransmitted (RETX)", 16, nil, 0x0010)
field("f_ar", BOOL, "pds.flags.ar", "ACK Request (AR)", 16, nil, 0x0008)
field("f_p", BOOL, "pds.flags.p", "Probe Packet (P)", 16, nil, 0x0008)
field("f_nt", BOOL, "pds.flags.nt", "NACK Type (NT: RUDI)", 16, nil, 0x0008)
field("f_syn", BOOL, "pds.flags.syn", "New PDC (SYN)", 16, nil, 0x0004)
field("f_req", U16, "pds.flags.req", "Request (REQ)", DEC, ACK_REQ, 0x0006)
field("rsvd_req", U16, "pds.flags.rsvd_rud_rod", "Reserved", HEX, nil, 0x0063)
field("rsvd_rudi", U16, "pds.flags.rsvd_rudi", "Reserved", HEX, nil, 0x004F)
field("rsvd_uud", U16, "pds.flags.rsvd_uud", "Reserved", HEX, nil, 0x007F)
field("rsvd_ack", U16, "pds.flags.rsvd_ack", "Reserved", HEX, nil, 0x0041)
field("rsvd_nack", U16, "pds.flags.rsvd_nack", "Reserved", HEX, nil, 0x0047)
field("rsvd_ctl", U16, "pds.flags.rsvd_ctl", "Reserved", HEX, nil, 0x0043)
-- PDS bodies
field("clear_psn", U32, "pds.clear_psn", "Clear PSN", HEX)
field("clear_psn_offset", I16, "pds.clear_psn_offset", "Clear PSN offset")
field("psn", U32, "pds.psn", "PSN", HEX)
field("ack_psn", U32, "pds.ack_psn", "ACK PSN", HEX)
field("ack_psn_offset", I16, "pds.ack_psn_offset", "ACK PSN offset")
field("cack_psn", U32, "pds.cack_psn", "Cumulative ACK PSN", HEX)
field("spdcid", U16, "pds.spdcid", "Source PDC ID", HEX)
field("dpdcid", U16, "pds.dpdcid", "Destination PDC ID", HEX)
field("pdc_mode", U16, "pds.pdc_mode", "PDC Mode (pdc_info)", HEX, nil, 0xF000)
field("pdc_use_rsv", BOOL, "pds.pdc_mode_use_rsv", "Use Reserved PDC")
field("pdc_rsv", U8, "pds.pdc_mode_rsv", "Reserved", HEX)
field("psn_offset", U16, "pds.psn_offset", "PSN offset", DEC, nil, 0x0FFF)
field("start_psn", U32, "pds.start_psn", "Start PSN", HEX)
field("ccc_id", U8, "pds.cc_state.ccc_id", "CCC ID", DEC)
field("credit_target", U24, "pds.cc_state.credit_target", "Credit Target", DEC_HEX)
field("probe_opaque", U16, "pds.ctrl_probe_opaque", "Probe Opaque", HEX)
field("ctl_payload", U32, "pds.ctrl_payload", "Payload", HEX)
field("rudi_pkt_id", U32, "pds.rudi.pkt_id", "RUDI ID", HEX)
field("rsvd16", U16, "pds.reserved", "Reserved", HEX)
field("nack_code", U8, "pds.nack.code", "NACK Code", HEX, NACK_CODES)
field("nack_vendor", U8, "pds.nack.vendor_code", "Vendor Code", HEX)
field("nack_psn", U32, "pds.nack.psn", "NACK PSN", HEX)
field("nack_payload", U32, "pds.nack.max_recv_psn_plus_1", "Payload (Max Recvd PSN + 1)", HEX)
field("nack_ccx", BYTES, "pds.nack.ccx_state", "NACK CCX State")
-- ACK_CC / ACK_CCX extension
field("ack_ext", BYTES, "pds.ack.prlg", "ACK Ext Hdr")
field("cc_type", U8, "pds.ack.cc_type", "CC Type", DEC, CC_TYPES, 0xF0)
field("cc_flags", U8, "pds.ack.cc_flags", "CC Flags", HEX, nil, 0x0F)
field("mpr", U8, "pds.ack.mpr", "Maximum PSN range (MPR)", DEC)
field("sack_offset", I16, "pds.ack.sack_offset", "SACK Offset")
field("sack_base", U32, "pds.ack.sack_base_psn", "SACK base PSN", HEX)
field("sack_bitmap", U64, "pds.ack.sack_bitmap", "SACK BITMAP", HEX)
field("cc_state", BYTES, "pds.ack.cc_state", "CC State")
field("ccx_state", BYTES, "pds.ack.ccx_state", "CCX State")
field("cc_service_time", U16, "pds.ack.cc_state.service_time", "Service Time", DEC)
field("cc_rc", BOOL, "pds.ack.cc_state.rc", "Restore Cwnd", 8, nil, 0x80)
field("cc_rcv_cwnd_pend", U8, "pds.ack.cc_state.rcv_cwnd_pend", "Cwnd Penalty", DEC, nil, 0x7F)
field("cc_rcvd_bytes", U24, "pds.ack.cc_state.rcvd_bytes", "Received Byte Count", DEC)
field("cc_credit", U24, "pds.ack.cc_state.credit", "Credit", DEC)
field("cc_reserved", BYTES, "pds.ack.cc_state.reserved", "Reserved")
field("cc_ooo", U16, "pds.ack.cc_state.ooo_count", "Out Of Order Count", DEC)
-- SES standard request
field("ses", BYTES, "ses", "SES")
field("std_rsv", U8, "ses.std.rsv", "Reserved(R)", HEX, nil, 0xC0)
field("opcode", U8, "ses.std.opcode", "Opcode", DEC, ses_opcode_vs, 0x3F)
field("std_flags", U8, "ses.std.flags", "Flags", HEX)
field("std_ver", U8, "ses.std.ver", "Version", DEC, nil, 0xC0)
field("std_dc", BOOL, "ses.std.dc", "Delivery Complete (DC)", 8, nil, 0x20)
field("std_ie", BOOL, "ses.std.ie", "Initiator Error (IE)", 8, nil, 0x10)
field("std_rel", BOOL, "ses.std.rel", "Relative", 8, REL_TFS, 0x08)
field("std_hd", BOOL, "ses.std.hd", "Header Data", 8, nil, 0x04)
field("std_eom", BOOL, "ses.std.eom", "End of Msg(EOM)", 8, nil, 0x02)
field("std_som", BOOL, "ses.std.som", "Start of Msg(SOM)", 8, nil, 0x01)
field("std_msg_id", U16, "ses.std.message_id", "Message ID", DEC)
field("std_ri_gen", U8, "ses.std.index_generation", "Index Generation", DEC)
field("std_job", U24, "ses.std.job_id", "Job ID", DEC)
field("std_rsv2", U16, "ses.std.reserved2", "Reserved", HEX, nil, 0xF000)
field("std_pid", U16, "ses.std.pidonfep", "PIDonFEP", DEC, nil, 0x0FFF)
field("std_rsv3", U16, "ses.std.reserved3", "Reserved", HEX, nil, 0xF000)
field("std_ri", U16, "ses.std.resource_index", "Resource Index (RI)", DEC, nil, 0x0FFF)
field("std_buf_off", U64, "ses.std.buffer_offset", "Buffer Offset", DEC_HEX)
field("std_restart", U64, "ses.std.restart_token", "Restart Token", HEX)
field("std_initiator", U32, "ses.std.initiator", "Initiator", HEX)
field("std_mkey", U64, "ses.std.mem_key_match_bits", "Memory Key/Match Bits", HEX)
field("std_hdr_data", U64, "ses.std.header_data", "Header Data", HEX)
field("std_rsv4", U32, "ses.std.reserved4", "Reserved", HEX, nil, 0xFFFFC000)
field("std_pay_len", U32, "ses.std.payload_length", "Payload Length", DEC, nil, 0x00003FFF)
field("std_msg_off", U32, "ses.std.message_offset", "Message Offset", DEC)
field("std_req_len", U32, "ses.std.request_length", "Request Length", DEC)
-- SES small (optimized non-matching) and medium requests: same first 12 bytes
for p, name in pairs({ sm_ = "ses.small_req", md_ = "ses.med_req" }) do
    field(p .. "rsv", U8, name .. ".rsv", "Reserved", HEX, nil, 0xC0)
    field(p .. "flags", U8, name .. ".flags", "Flags", HEX)
    field(p .. "ver", U8, name .. ".flags.ver", "Version", DEC, nil, 0xC0)
    field(p .. "dc", BOOL, name .. ".flags.dc", "Delivery Complete (DC)", 8, nil, 0x20)
    field(p .. "ie", BOOL, name .. ".flags.ie", "Initiator Error (IE)", 8, nil, 0x10)
    field(p .. "rel", BOOL, name .. ".flags.rel", "Relative", 8, REL_TFS, 0x08)
    field(p .. "eom", BOOL, name .. ".eom", "End of Msg(EOM)", 8, nil, 0x02)
    field(p .. "som", BOOL, name .. ".som", "Start of Msg(SOM)", 8, nil, 0x01)
    field(p .. "rsv2", U16, name .. ".flags.rsv2", "Reserved", HEX, nil, 0xC000)
    field(p .. "req_len", U16, name .. ".req_length", "Request Length", DEC, nil, 0x3FFF)
    field(p .. "job", U24, name .. ".job_id", "Job ID", DEC)
    field(p .. "rsv3", U16, name .. ".rsv3", "Reserved", HEX, nil, 0xF000)
    field(p .. "pid", U16, name .. ".pidonfep", "PIDonFEP", DEC, nil, 0x0FFF)
    field(p .. "rsv4", U16, name .. ".rsv4", "Reserved", HEX, nil, 0xF000)
    field(p .. "ri", U16, name .. ".resource_index", "Resource Index", DEC, nil, 0x0FFF)
    field(p .. "buf_off", U64, name .. ".buffer_offset", "Buffer Offset", DEC_HEX)
end
field("sm_frsvd", U8, "ses.small_req.flags.rsvd", "Reserved", DEC, nil, 0x04)
field("sm_ri_gen", U8, "ses.small_req.index_generation", "Index Generation", DEC)
field("md_hd", BOOL, "ses.med_req.flags.hd", "HD", 8, nil, 0x04)
field("md_ri_gen", U8, "ses.med_req.resource_index_generation", "Resource Index Generation", DEC)
field("md_hdr_data", U64, "ses.med_req.header_data", "Header Data", DEC_HEX)
field("md_initiator", U32, "ses.med_req.initiator", "Initiator", HEX)
field("md_mkey", U64, "ses.med_req.mem_key_match_bits", "Match Bits/Memory Key", HEX)
-- extension headers
field("amo", BYTES, "ses.atomic_op_ext_hdr", "Atomic Operation Extension Header")
field("cas", BYTES, "ses.comp_swap_ext_hdr", "Compare and Swap Operation Atomic Header")
for p, name in pairs({ amo_ = "ses.atomic_op_ext_hdr", cas_ = "ses.comp_swap_ext_hdr" }) do
    field(p .. "op", U8, name .. ".atomic_opcode", "Atomic Opcode", HEX, AMO_OPCODES)
    field(p .. "dt", U8, name .. ".atomic_data_type", "Atomic Data type", HEX, AMO_TYPES)
    field(p .. "sem", U8, name .. ".sem_ctl", "Semantic Control", DEC, SEM_CTL)
    field(p .. "rsvd", U8, name .. ".rsvd", "Rsvd", HEX)
end
field("cas_cmp", BYTES, "ses.comp_swap_ext_hdr.comp_value", "Compare Value")
field("cas_swap", BYTES, "ses.comp_swap_ext_hdr.swap_value", "Swap Value")
field("rdv", BYTES, "ses.rendv_ext_hdr", "Rendezvous Extension Header")
field("rdv_eager", U32, "ses.rendv_ext_hdr.eager_length", "Eager Length", DEC)
field("rdv_rsvd", U16, "ses.rendv_ext_hdr.reserved", "Reserved", HEX, nil, 0xC000)
field("rdv_pid", U16, "ses.rendv_ext_hdr.read_pid_on_fep", "Read PIDonFEP", DEC, nil, 0x3FFF)
field("rdv_rsvd2", U16, "ses.rendv_ext_hdr.reserved2", "Reserved", HEX, nil, 0xF000)
field("rdv_ri", U16, "ses.rendv_ext_hdr.read_resource_index", "Read Resource Index", DEC, nil,
    0x0FFF)
field("rdv_off", U64, "ses.rendv_ext_hdr.read_offset", "Read Offset", HEX)
field("rdv_mb", U64, "ses.rendv_ext_hdr.read_match_bits", "Read Match Bits", HEX)
-- SES responses
field("rsp_list", U8, "ses.rsp.list", "List", DEC, nil, 0xC0)
field("rsp_opcode", U8, "ses.rsp.opcode", "Opcode", DEC, RSP_OPCODES, 0x3F)
field("rsp_ver", U8, "ses.rsp.ver", "Version", DEC, nil, 0xC0)
field("rsp_rc", U8, "ses.rsp.return_code", "Return Code", HEX, RETURN_CODES, 0x3F)
field("rsp_msg_id", U16, "ses.rsp.message_id", "Response Message ID", DEC)
field("rsp_ri_gen", U8, "ses.rsp.resource_index_gen", "Resource Index generation", DEC)
field("rsp_job", U24, "ses.rsp.job_id", "Job ID", DEC)
field("rsp_mod_len", U32, "ses.rsp.mod_length", "Modified Length", DEC)
field("rsp_reserved", U8, "ses.rsp.reserved", "Reserved", HEX)
field("rsp_read_msg_id", U16, "ses.rsp.read_req_message_id", "Message ID", DEC)
field("rsp_reserved2", U16, "ses.rsp.reserved2", "Reserved", HEX, nil, 0xC000)
field("rsp_pay_len", U16, "ses.rsp.payload_length", "Payload Length", DEC, nil, 0x3FFF)
field("rsp_msg_off", U32, "ses.rsp.message_offset", "Message Offset", DEC)
field("rsp_reserved3", U16, "ses.rsp.reserved3", "Rsv", HEX, nil, 0xC000)
field("rsp_orig_psn", U32, "ses.rsp.orig_req_psn", "Original Request PSN", HEX)

local fields = {}
for _, f in pairs(F) do fields[#fields + 1] = f end
uet.fields = fields

---------------------------------------------------------------------------
-- Expert info (malformed packets only; well-formed packets get none)
---------------------------------------------------------------------------
local function malformed(abbr, text)
    return ProtoExpert.new(abbr, text, expert.group.MALFORMED, expert.severity.ERROR)
end
local E = {
    pds = malformed("uet.pds.invalid_header", "Invalid PDS header length"),
    req = malformed("uet.pds.rud_rod.invalid_header", "Invalid PDS RUD/ROD header length"),
    ack = malformed("uet.pds.ack.invalid_header", "Invalid PDS ACK header length"),
    pds_type = malformed("uet.pds.invalid_type", "Reserved or unknown PDS type"),
    ses = malformed("uet.ses.invalid_header", "Invalid SES header length"),
    ses_nh = malformed("uet.ses.invalid_next_header", "Reserved or unknown PDS next header"),
    rsp_op = malformed("uet.ses.rsp.invalid_opcode", "Invalid SES Resp opcode"),
    tss = malformed("uet.tss.invalid_header", "Invalid TSS header length"),
    entropy = malformed("uet.entropy.invalid_header", "Invalid entropy header length"),
}
uet.experts = { E.pds, E.req, E.ack, E.pds_type, E.ses, E.ses_nh, E.rsp_op, E.tss, E.entropy }

---------------------------------------------------------------------------
-- Helpers
---------------------------------------------------------------------------
local data_dissector = Dissector.get("data")

-- True when `len` bytes are available at `off`; otherwise flags `item` with
-- the malformed expert `ef` and returns false.
local function need(tvb, off, len, item, ef, what)
    local have = tvb:len() - off
    if have >= len then return true end
    item:add_proto_expert_info(ef, fmt("%s: need %d bytes, have %d", what, len, math.max(have, 0)))
    return false
end

-- Header item spanning min(len, available) bytes; the parent tree itself when
-- no byte is left (a zero-length range at the very end is out of bounds).
local function header_item(tree, f, tvb, off, len)
    local avail = math.min(len, tvb:len() - off)
    if avail <= 0 then return tree end
    return tree:add(f, tvb(off, avail))
end

local function add_all(tree, tvb, off, list)
    for _, e in ipairs(list) do tree:add(e[1], tvb(off + e[2], e[3])) end
end

local function u32(v) return band(v, 0xFFFFFFFF) end

-- Space-separated names of the set flags, e.g. "[RETX SYN]", or "".
local function flag_list(names)
    if #names == 0 then return "" end
    return "[" .. table.concat(names, " ") .. "]"
end

-- Flag subtree; returns the names of the set flags for the Info column.
local FLAG_SETS = {
    req  = { { "f_retx", 0x10, "RETX" }, { "f_ar", 0x08, "AR" }, { "f_syn", 0x04, "SYN" },
             { "rsvd_req" } },
    rudi = { { "f_m", 0x20, "M" }, { "f_retx", 0x10, "RETX" }, { "rsvd_rudi" } },
    uud  = { { "rsvd_uud" } },
    ack  = { { "f_m", 0x20, "M" }, { "f_retx", 0x10, "RETX" }, { "f_p", 0x08, "P" },
             { "f_req" }, { "rsvd_ack" } },
    nack = { { "f_m", 0x20, "M" }, { "f_retx", 0x10, "RETX" }, { "f_nt", 0x08, "NT" },
             { "rsvd_nack" } },
    cp   = { { "f_isrod", 0x20, "ISROD" }, { "f_retx", 0x10, "RETX" }, { "f_ar", 0x08, "AR" },
             { "f_syn", 0x04, "SYN" }, { "rsvd_ctl" } },
}
local function dissect_flags(tree, range, kind, flags)
    local sub = tree:add(F.flags, range)
    local names = {}
    for _, e in ipairs(FLAG_SETS[kind] or {}) do
        sub:add(F[e[1]], range)
        if e[2] and band(flags, e[2]) ~= 0 then names[#names + 1] = e[3] end
    end
    if kind == "ack" then
        local req = rshift(band(flags, 0x06), 1)
        if req == 1 then names[#names + 1] = "REQ=CLEAR" elseif req == 2 then
            names[#names + 1] = "REQ=CLOSE" end
    end
    return names
end

-- Bytes 10-11 of a request/CP with SYN: pdc_info:4 | psn_offset:12.
local function dissect_syn_word(tree, tvb, off, psn)
    local range = tvb(off, 2)
    local word = range:uint()
    local bit = uet.prefs.use_rsv_bit
    local info = rshift(word, 12)
    local mode = tree:add(F.pdc_mode, range)
    mode:add(F.pdc_use_rsv, range, band(word, lshift(1, bit)) ~= 0)
    -- the other three pdc_info bits
    local rsv = (bit == RSV_BIT_W) and band(info, 0x7) or rshift(band(info, 0xE), 1)
    mode:add(F.pdc_rsv, range, rsv)
    local psn_off = band(word, 0x0FFF)
    tree:add(F.psn_offset, range)
    tree:add(F.start_psn, range, u32(psn - psn_off)):set_generated()
    return u32(psn - psn_off)
end

---------------------------------------------------------------------------
-- PDS headers. Each returns the Info text; `o` is the PDS start.
---------------------------------------------------------------------------
local function dissect_req(tvb, t, o, ptype, flags)
    local off16 = tvb(o + 2, 2):int()
    local psn = tvb(o + 4, 4):uint()
    t:add(F.clear_psn, tvb(o + 2, 2), u32(psn + off16))
    t:add(F.clear_psn_offset, tvb(o + 2, 2))
    t:add(F.psn, tvb(o + 4, 4))
    t:add(F.spdcid, tvb(o + 8, 2))
    local text = fmt("PSN=0x%08x SPDCID=0x%04x", psn, tvb(o + 8, 2):uint())
    if band(flags, 0x04) ~= 0 then
        local start = dissect_syn_word(t, tvb, o + 10, psn)
        text = text .. fmt(" Start_PSN=0x%08x", start)
    else
        t:add(F.dpdcid, tvb(o + 10, 2))
        text = text .. fmt(" DPDCID=0x%04x", tvb(o + 10, 2):uint())
    end
    if ptype == 13 or ptype == 14 then
        t:add(F.ccc_id, tvb(o + 12, 1))
        t:add(F.credit_target, tvb(o + 13, 3))
    end
    return text
end

local function dissect_rudi(tvb, t, o)
    t:add(F.rsvd16, tvb(o + 2, 2))
    t:add(F.rudi_pkt_id, tvb(o + 4, 4))
    return fmt("PKT_ID=0x%08x", tvb(o + 4, 4):uint())
end

local function dissect_cc_state(tree, tvb, off, cc_type)
    local st = tree:add(F.cc_state, tvb(off, 8))
    if cc_type == 0 then
        st:append_text(" (NSCC)")
        add_all(st, tvb, off, { { F.cc_service_time, 0, 2 }, { F.cc_rc, 2, 1 },
            { F.cc_rcv_cwnd_pend, 2, 1 }, { F.cc_rcvd_bytes, 3, 3 }, { F.cc_ooo, 6, 2 } })
    elseif cc_type == 1 then
        st:append_text(" (Credit)")
        add_all(st, tvb, off, { { F.cc_credit, 0, 3 }, { F.cc_reserved, 3, 3 },
            { F.cc_ooo, 6, 2 } })
    end
end

local function dissect_ack(tvb, t, o, ptype, flags)
    local off16 = tvb(o + 2, 2):int()
    local cack = tvb(o + 4, 4):uint()
    if band(flags, 0x08) ~= 0 then
        t:add(F.probe_opaque, tvb(o + 2, 2))
    else
        t:add(F.ack_psn, tvb(o + 2, 2), u32(cack + off16))
        t:add(F.ack_psn_offset, tvb(o + 2, 2))
    end
    t:add(F.cack_psn, tvb(o + 4, 4))
    t:add(F.spdcid, tvb(o + 8, 2))
    t:add(F.dpdcid, tvb(o + 10, 2))
    local text = fmt("CACK_PSN=0x%08x SPDCID=0x%04x DPDCID=0x%04x", cack,
        tvb(o + 8, 2):uint(), tvb(o + 10, 2):uint())
    if ptype == 8 or ptype == 9 then
        local ext = t:add(F.ack_ext, tvb(o + 12, ptype == 8 and 20 or 28))
        local cc_type = rshift(tvb(o + 12, 1):uint(), 4)
        ext:add(F.cc_type, tvb(o + 12, 1))
        ext:add(F.cc_flags, tvb(o + 12, 1))
        ext:add(F.mpr, tvb(o + 13, 1))
        ext:add(F.sack_offset, tvb(o + 14, 2))
        ext:add(F.sack_base, tvb(o + 14, 2), u32(cack + tvb(o + 14, 2):int())):set_generated()
        ext:add(F.sack_bitmap, tvb(o + 16, 8))
        if ptype == 8 then
            dissect_cc_state(ext, tvb, o + 24, cc_type)
        else
            ext:add(F.ccx_state, tvb(o + 24, 16))
        end
    end
    return text
end

local function dissect_nack(tvb, t, o, ptype, flags)
    local code = tvb(o + 2, 1):uint()
    t:add(F.nack_code, tvb(o + 2, 1))
    t:add(F.nack_vendor, tvb(o + 3, 1))
    t:add(F.nack_psn, tvb(o + 4, 4))
    if band(flags, 0x08) ~= 0 then t:add(F.rudi_pkt_id, tvb(o + 4, 4)) end
    t:add(F.spdcid, tvb(o + 8, 2))
    t:add(F.dpdcid, tvb(o + 10, 2))
    t:add(F.nack_payload, tvb(o + 12, 4))
    if ptype == 12 then t:add(F.nack_ccx, tvb(o + 16, 16)) end
    return fmt("%s NACK_PSN=0x%08x SPDCID=0x%04x DPDCID=0x%04x",
        NACK_CODES[code] or fmt("code=0x%02x", code), tvb(o + 4, 4):uint(),
        tvb(o + 8, 2):uint(), tvb(o + 10, 2):uint())
end

local function dissect_cp(tvb, t, o, ctl, flags)
    local psn = tvb(o + 4, 4):uint()
    t:add(F.probe_opaque, tvb(o + 2, 2))
    t:add(F.psn, tvb(o + 4, 4))
    t:add(F.spdcid, tvb(o + 8, 2))
    local text = fmt("%s PSN=0x%08x SPDCID=0x%04x", CTL_TYPES[ctl] or fmt("ctl=%d", ctl), psn,
        tvb(o + 8, 2):uint())
    if band(flags, 0x04) ~= 0 then
        text = text .. fmt(" Start_PSN=0x%08x", dissect_syn_word(t, tvb, o + 10, psn))
    else
        t:add(F.dpdcid, tvb(o + 10, 2))
        text = text .. fmt(" DPDCID=0x%04x", tvb(o + 10, 2):uint())
    end
    t:add(F.ctl_payload, tvb(o + 12, 4)):append_text(fmt(" (%s)", CTL_PAYLOAD[ctl] or "?"))
    return text
end

---------------------------------------------------------------------------
-- SES headers. Each returns (bytes consumed, Info text) or nil when truncated.
---------------------------------------------------------------------------
local function dissect_atomic_ext(tvb, tree, off)
    local item = header_item(tree, F.amo, tvb, off, 4)
    if not need(tvb, off, 1, item, E.ses, "SES atomic extension header") then return nil end
    local op = tvb(off, 1):uint()
    local cswap = amo_is_cswap(op) or (op == AMO_MSWAP and uet.prefs.mswap_cswap)
    local name = AMO_OPCODES[op] or fmt("0x%02x", op)
    if cswap then
        item:set_hidden()
        item = header_item(tree, F.cas, tvb, off, 36)
        if not need(tvb, off, 36, item, E.ses, "SES compare-and-swap extension header") then
            return nil
        end
        add_all(item, tvb, off, { { F.cas_op, 0, 1 }, { F.cas_dt, 1, 1 }, { F.cas_sem, 2, 1 },
            { F.cas_rsvd, 3, 1 }, { F.cas_cmp, 4, 16 }, { F.cas_swap, 20, 16 } })
        return 36, "amo=" .. name
    end
    if not need(tvb, off, 4, item, E.ses, "SES atomic extension header") then return nil end
    add_all(item, tvb, off, { { F.amo_op, 0, 1 }, { F.amo_dt, 1, 1 }, { F.amo_sem, 2, 1 },
        { F.amo_rsvd, 3, 1 } })
    return 4, "amo=" .. name
end

local function dissect_rendezvous_ext(tvb, tree, off)
    local item = header_item(tree, F.rdv, tvb, off, 24)
    if not need(tvb, off, 24, item, E.ses, "SES rendezvous extension header") then return nil end
    add_all(item, tvb, off, { { F.rdv_eager, 0, 4 }, { F.rdv_rsvd, 4, 2 }, { F.rdv_pid, 4, 2 },
        { F.rdv_rsvd2, 6, 2 }, { F.rdv_ri, 6, 2 }, { F.rdv_off, 8, 8 }, { F.rdv_mb, 16, 8 } })
    return 24, fmt("eager=%d", tvb(off, 4):uint())
end

-- Extension header after a request, chosen by opcode.
local function dissect_ext(tvb, tree, off, opcode, allow_rendezvous)
    if ATOMIC_OPCODES[opcode] then return dissect_atomic_ext(tvb, tree, off) end
    if allow_rendezvous and RENDEZVOUS_OPCODES[opcode] then
        return dissect_rendezvous_ext(tvb, tree, off)
    end
    return 0, nil
end

local function som_eom(flags)
    local n = {}
    if band(flags, 0x01) ~= 0 then n[#n + 1] = "SOM" end
    if band(flags, 0x02) ~= 0 then n[#n + 1] = "EOM" end
    return flag_list(n)
end

local function dissect_std(tvb, s, o)
    if not need(tvb, o, 44, s, E.ses, "SES STD header") then return nil end
    local opcode = band(tvb(o, 1):uint(), 0x3F)
    local flags = tvb(o + 1, 1):uint()
    s:add(F.std_rsv, tvb(o, 1))
    s:add(F.opcode, tvb(o, 1))
    local fl = s:add(F.std_flags, tvb(o + 1, 1))
    for _, k in ipairs({ "std_ver", "std_dc", "std_ie", "std_rel", "std_hd", "std_eom",
        "std_som" }) do fl:add(F[k], tvb(o + 1, 1)) end
    add_all(s, tvb, o, { { F.std_msg_id, 2, 2 }, { F.std_ri_gen, 4, 1 }, { F.std_job, 5, 3 },
        { F.std_rsv2, 8, 2 }, { F.std_pid, 8, 2 }, { F.std_rsv3, 10, 2 }, { F.std_ri, 10, 2 } })
    -- deferrable sends carry a restart token instead of the buffer offset
    local deferrable = (opcode == 0x08 or opcode == 0x0B)
    s:add(deferrable and F.std_restart or F.std_buf_off, tvb(o + 12, 8))
    s:add(F.std_initiator, tvb(o + 20, 4))
    s:add(opcode == 0x0C and F.std_restart or F.std_mkey, tvb(o + 24, 8))
    if band(flags, 0x01) ~= 0 then
        s:add(F.std_hdr_data, tvb(o + 32, 8))
    else
        add_all(s, tvb, o, { { F.std_rsv4, 32, 4 }, { F.std_pay_len, 32, 4 },
            { F.std_msg_off, 36, 4 } })
    end
    s:add(F.std_req_len, tvb(o + 40, 4))
    local text = fmt("%s msg=%d job=%d %s", SES_OPCODES[opcode] or fmt("op=0x%02x", opcode),
        tvb(o + 2, 2):uint(), tvb(o + 5, 3):uint(), som_eom(flags))
    local n, ext_text = dissect_ext(tvb, s, o + 44, opcode, true)
    if not n then return nil, text end
    if ext_text then text = text .. " " .. ext_text end
    return 44 + n, text
end

-- Small (20 B) and medium (32 B) requests share the first 12 bytes.
local function dissect_small_medium(tvb, s, o, medium)
    local size = medium and 32 or 20
    local p = medium and "md_" or "sm_"
    if not need(tvb, o, size, s, E.ses, medium and "SES medium request header"
        or "SES small request header") then return nil end
    local opcode = band(tvb(o, 1):uint(), 0x3F)
    local flags = tvb(o + 1, 1):uint()
    s:add(F[p .. "rsv"], tvb(o, 1))
    s:add(F.opcode, tvb(o, 1))
    local fl = s:add(F[p .. "flags"], tvb(o + 1, 1))
    for _, k in ipairs({ "ver", "dc", "ie", "rel", medium and "hd" or "frsvd", "eom", "som" }) do
        fl:add(F[p .. k], tvb(o + 1, 1))
    end
    add_all(s, tvb, o, { { F[p .. "rsv2"], 2, 2 }, { F[p .. "req_len"], 2, 2 },
        { F[p .. "ri_gen"], 4, 1 }, { F[p .. "job"], 5, 3 }, { F[p .. "rsv3"], 8, 2 },
        { F[p .. "pid"], 8, 2 }, { F[p .. "rsv4"], 10, 2 }, { F[p .. "ri"], 10, 2 } })
    if medium then
        s:add(band(flags, 0x04) ~= 0 and F.md_hdr_data or F.md_buf_off, tvb(o + 12, 8))
        s:add(F.md_initiator, tvb(o + 20, 4))
        s:add(F.md_mkey, tvb(o + 24, 8))
    else
        s:add(F.sm_buf_off, tvb(o + 12, 8))
    end
    local text = fmt("%s len=%d job=%d %s", SES_OPCODES[opcode] or fmt("op=0x%02x", opcode),
        band(tvb(o + 2, 2):uint(), 0x3FFF), tvb(o + 5, 3):uint(), som_eom(flags))
    local n, ext_text = dissect_ext(tvb, s, o + size, opcode, false)
    if not n then return nil, text end
    if ext_text then text = text .. " " .. ext_text end
    return size + n, text
end

-- Responses: nh 4 (12 B), 5 (20 B + data), 6 (small, 4 or 12 B + data).
local function dissect_rsp(tvb, s, o, nh)
    local size = (nh == 4 and 12) or (nh == 5 and 20) or uet.prefs.rsp_data_small
    if not need(tvb, o, size, s, E.ses, "SES response header") then return nil end
    local opcode = band(tvb(o, 1):uint(), 0x3F)
    local rc = band(tvb(o + 1, 1):uint(), 0x3F)
    s:add(F.rsp_list, tvb(o, 1))
    local op_item = s:add(F.rsp_opcode, tvb(o, 1))
    s:add(F.rsp_ver, tvb(o + 1, 1))
    s:add(F.rsp_rc, tvb(o + 1, 1))
    local with_data = (nh ~= 4)
    if with_data ~= (opcode == 2) then
        op_item:add_proto_expert_info(E.rsp_op, fmt("Opcode %d not valid for next header %d",
            opcode, nh))
    end
    local text = fmt("%s rc=%s", RSP_INFO[opcode] or fmt("op=%d", opcode),
        RETURN_CODES[rc] or fmt("0x%02x", rc))
    if nh == 4 then
        add_all(s, tvb, o, { { F.rsp_msg_id, 2, 2 }, { F.rsp_ri_gen, 4, 1 }, { F.rsp_job, 5, 3 },
            { F.rsp_mod_len, 8, 4 } })
        text = text .. fmt(" msg=%d", tvb(o + 2, 2):uint())
    elseif nh == 5 then
        add_all(s, tvb, o, { { F.rsp_msg_id, 2, 2 }, { F.rsp_reserved, 4, 1 },
            { F.rsp_job, 5, 3 }, { F.rsp_read_msg_id, 8, 2 }, { F.rsp_reserved2, 10, 2 },
            { F.rsp_pay_len, 10, 2 }, { F.rsp_mod_len, 12, 4 }, { F.rsp_msg_off, 16, 4 } })
        text = text .. fmt(" msg=%d len=%d", tvb(o + 2, 2):uint(),
            band(tvb(o + 10, 2):uint(), 0x3FFF))
    else
        add_all(s, tvb, o, { { F.rsp_reserved3, 2, 2 }, { F.rsp_pay_len, 2, 2 } })
        if size == 12 then
            add_all(s, tvb, o, { { F.rsp_reserved, 4, 1 }, { F.rsp_job, 5, 3 },
                { F.rsp_orig_psn, 8, 4 } })
        end
        text = text .. fmt(" len=%d", band(tvb(o + 2, 2):uint(), 0x3FFF))
    end
    return size, text
end

local function dissect_ses(tvb, tree, o, nh)
    if o >= tvb:len() then
        tree:add_proto_expert_info(E.ses, fmt("%s header missing (PDS next header %d)",
            NH_NAMES[nh] or "SES", nh))
        return nil
    end
    local s = tree:add(F.ses, tvb(o, tvb:len() - o))
    s:set_text("SES: " .. (NH_NAMES[nh] or fmt("next header %d", nh)))
    local n, text
    if nh == 3 then
        n, text = dissect_std(tvb, s, o)
    elseif nh == 1 or nh == 2 then
        n, text = dissect_small_medium(tvb, s, o, nh == 2)
    elseif nh >= 4 and nh <= 6 then
        n, text = dissect_rsp(tvb, s, o, nh)
    else
        s:add_proto_expert_info(E.ses_nh, fmt("PDS next header %d is reserved", nh))
        return nil
    end
    if n then s:set_len(n) end
    return n, text
end

---------------------------------------------------------------------------
-- TSS, PDS and top level
---------------------------------------------------------------------------
-- Returns bytes consumed (the whole rest: it is encrypted) and Info text.
local function dissect_tss(tvb, tree, o, limit)
    local b0 = tvb(o, 1):uint()
    local sp = band(b0, 0x04) ~= 0
    local size = sp and 16 or 12
    local t = header_item(tree, F.tss, tvb, o, size)
    t:set_text("TSS (security header)")
    if not need(tvb, o, size, t, E.tss, "TSS header") then return tvb:len() - o, "TSS" end
    add_all(t, tvb, o, { { F.tss_type, 0, 1 }, { F.tss_sp, 0, 1 }, { F.tss_rsvd, 0, 1 },
        { F.tss_an, 0, 1 }, { F.tss_sdi, 1, 3 } })
    local p = o + 4
    if sp then t:add(F.tss_ssi, tvb(p, 4)); p = p + 4 end
    t:add(F.tss_tsc, tvb(p, 8))
    p = p + 8
    -- everything after the TSS is ciphertext; the last 16 bytes are the AES-GCM ICV
    local rest = limit - p
    if rest > 16 then
        tree:add(F.tss_ciphertext, tvb(p, rest - 16))
        tree:add(F.tss_icv, tvb(limit - 16, 16))
    elseif rest > 0 then
        tree:add(F.tss_ciphertext, tvb(p, rest))
    end
    return limit - o, fmt("TSS SDI=0x%06x%s [encrypted]", tvb(o + 1, 3):uint(),
        sp and fmt(" SSI=0x%08x", tvb(o + 4, 4):uint()) or "")
end

local PDS_BODY = { req = dissect_req, ack = dissect_ack, nack = dissect_nack }

-- Returns bytes consumed (PDS + SES) and a list of Info parts.
local function dissect_pds(tvb, tree, o)
    local t = tree:add(F.pds, tvb(o, math.min(4, tvb:len() - o)))  -- caller: o < len
    if not need(tvb, o, 4, t, E.pds, "PDS header") then return tvb:len() - o, { "PDS" } end
    local word = tvb(o, 2):uint()
    local ptype, nh, flags = rshift(word, 11), band(rshift(word, 7), 0xF), band(word, 0x7F)
    local d = PDS[ptype]
    t:add(F.pds_type, tvb(o, 2))
    t:set_text("PDS: " .. (d and d[1] or fmt("type %d", ptype)))
    if not d or d[4] == "tss" then
        t:add_proto_expert_info(E.pds_type, fmt("PDS type %d is reserved", ptype))
        return tvb:len() - o, { fmt("PDS type %d", ptype) }
    end
    local kind = d[4]
    t:add(kind == "cp" and F.pds_ctl_type or F.pds_nh, tvb(o, 2))
    local names = dissect_flags(t, tvb(o, 2), kind, flags)
    local info = { d[2] }
    if not need(tvb, o, d[3], t, kind == "req" and E.req or
        ((kind == "ack") and E.ack or E.pds), d[2] .. " header") then
        return tvb:len() - o, info
    end
    t:set_len(d[3])
    local text
    if kind == "rudi" then
        text = dissect_rudi(tvb, t, o)
    elseif kind == "uud" then
        t:add(F.rsvd16, tvb(o + 2, 2))
    elseif kind == "cp" then
        text = dissect_cp(tvb, t, o, nh, flags)
    else
        text = PDS_BODY[kind](tvb, t, o, ptype, flags)
    end
    if text then info[#info + 1] = text end
    if #names > 0 then info[#info + 1] = flag_list(names) end
    local consumed = d[3]
    -- control packets carry no SES header
    if kind ~= "cp" and nh ~= 0 then
        local n, ses_text = dissect_ses(tvb, tree, o + d[3], nh)
        if ses_text then info[#info + 1] = ses_text end
        consumed = n and (consumed + n) or (tvb:len() - o)
    end
    return consumed, info
end

local function dissect_uet(tvb, pinfo, tree, native_ip)
    pinfo.cols.protocol:set("UET")
    local top = tree:add(uet, tvb())
    local o, limit = 0, tvb:len()
    if native_ip then
        if not need(tvb, 0, 4, top, E.entropy, "Entropy header") then
            pinfo.cols.info:set("UET [truncated]")
            return limit
        end
        top:add(F.entropy, tvb(0, 2))
        top:add(F.entropy_rsvd, tvb(2, 2))
        o = 4
    elseif limit > 0 then
        -- over UDP the source port is the entropy
        top:add(F.entropy, tvb(0, 0), pinfo.src_port):set_generated()
    end
    if limit - o < 1 then
        top:add_proto_expert_info(E.pds, "No PDS header")
        pinfo.cols.info:set("UET [truncated]")
        return limit
    end
    local info
    if rshift(tvb(o, 1):uint(), 3) == 1 then
        local _, text = dissect_tss(tvb, top, o, limit)
        info = { text }
    else
        local with_crc = native_ip and uet.prefs.ip_crc_trailer and limit - o >= 8
        if with_crc then limit = limit - 4 end
        local sub = (limit < tvb:len()) and tvb(0, limit):tvb() or tvb
        local n
        n, info = dissect_pds(sub, top, o)
        o = o + n
        if o < limit then data_dissector:call(tvb(o, limit - o):tvb(), pinfo, tree) end
        if with_crc then top:add(F.crc32c, tvb(limit, 4)) end
    end
    pinfo.cols.info:set(table.concat(info, " "))
    return tvb:len()
end

function uet.dissector(tvb, pinfo, tree) return dissect_uet(tvb, pinfo, tree, false) end
function uet_ip.dissector(tvb, pinfo, tree) return dissect_uet(tvb, pinfo, tree, true) end

---------------------------------------------------------------------------
-- Registration (re-done when the port/protocol preferences change)
---------------------------------------------------------------------------
local udp_table = DissectorTable.get("udp.port")
local ip_table = DissectorTable.get("ip.proto")
local current = { udp = 0, ip = 0 }

local function register()
    if current.udp ~= 0 then udp_table:remove(current.udp, uet) end
    if current.ip ~= 0 then ip_table:remove(current.ip, uet_ip) end
    current.udp, current.ip = uet.prefs.udp_port, uet.prefs.ip_proto
    if current.udp ~= 0 then udp_table:add(current.udp, uet) end
    if current.ip ~= 0 then ip_table:add(current.ip, uet_ip) end
end

uet.prefs_changed = register
register()
pcall(function()
    udp_table:add_for_decode_as(uet)
    ip_table:add_for_decode_as(uet_ip)
end)
