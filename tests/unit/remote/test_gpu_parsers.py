"""The nvidia-smi readers against every real capture in the shared fixtures, by file name.

Each test asserts values read off the capture by eye (a row's pwr, a GPU's memory, the active
reasons), so a parser that merely "returns something" fails.
"""

from __future__ import annotations

import re

import pytest
from fakes import FIXTURES, capture, capture_what

from gpuroom.remote.gpu import (
    parse_clock_reasons,
    parse_dmon,
    parse_nvsmi_table,
    parse_query_csv,
    smi_value,
)

pytestmark = pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"no fixtures at {FIXTURES}")


def _queried_fields(rel: str) -> list[str]:
    """The --query-gpu field list of a capture's ``# what:`` line (noheader captures)."""
    m = re.search(r"--query-gpu=(\S+)", capture_what(rel))
    assert m, rel
    return m.group(1).split(",")


# ---------------------------------------------------------------- every capture has a test


@pytest.mark.parametrize("folder", ["dmon", "query_gpu", "throttle", "nvsmi_table"])
def test_every_capture_is_named_in_this_file(folder: str) -> None:
    from pathlib import Path

    source = Path(__file__).read_text(encoding="utf-8")
    names = sorted(p.name for p in (FIXTURES / folder).iterdir() if p.suffix == ".txt")
    assert names, folder
    missing = [n for n in names if f'"{folder}/{n}"' not in source]
    assert missing == [], f"captures without a test: {missing}"


# ---------------------------------------------------------------- dmon


def test_dmon_old_header_4gpu_decommented() -> None:
    rows = parse_dmon(capture("dmon/4gpu-old-header-in-python-comment.txt"))
    assert [r["gpu"] for r in rows] == [0, 1, 2, 3]
    assert rows[0] == {"gpu": 0, "pwr": 112, "temp": 87, "sm": 19, "mem": 7, "enc": 0,
                       "dec": 0, "mclk": 5005, "pclk": 1480}
    assert rows[3]["sm"] == 93
    assert rows[3]["pclk"] == 1784


def test_dmon_old_pucvmet_single_gpu_index_1() -> None:
    rows = parse_dmon(capture("dmon/bogon-pucvmet-i1-c1-old-header.txt"))
    assert len(rows) == 1
    row = rows[0]
    assert row["gpu"] == 1
    assert (row["pwr"], row["temp"], row["enc"], row["mclk"], row["pclk"]) == (25, 43, 40, 3499,
                                                                               1721)
    assert (row["fb"], row["bar1"], row["rxpci"], row["txpci"]) == (442, 2, 577, 95)
    assert row["sbecc"] is None
    assert row["dbecc"] is None
    assert row["pviol"] == 0
    assert row["tviol"] == 0


def test_dmon_new_wide_gb10_has_no_memory_clock() -> None:
    rows = parse_dmon(capture("dmon/dgx-spark-gb10-wide-mclk-dash.txt"))
    assert len(rows) == 1
    row = rows[0]
    assert list(row) == ["gpu", "pwr", "gtemp", "mtemp", "sm", "mem", "enc", "dec", "jpg", "ofa",
                         "mclk", "pclk"]
    assert row["mclk"] is None
    assert row["mtemp"] is None
    assert (row["pwr"], row["gtemp"], row["pclk"]) == (3, 38, 208)


def test_dmon_new_wide_readme() -> None:
    rows = parse_dmon(capture("dmon/gpu-load-smi-readme-wide.txt"))
    assert rows == [{"gpu": 0, "pwr": 3, "gtemp": 51, "mtemp": None, "sm": 0, "mem": 0,
                     "enc": 0, "dec": 0, "jpg": 0, "ofa": 0, "mclk": 405, "pclk": 210}]


def test_dmon_gtx1050ti_truncated_power_unsupported() -> None:
    rows = parse_dmon(capture("dmon/gtx1050ti-x2-pucvmet-pwr-dash-a.txt"))
    assert len(rows) == 8
    assert [r["gpu"] for r in rows] == [0, 1] * 4
    assert all(r["pwr"] is None for r in rows)
    assert rows[2]["sm"] == 94
    assert rows[2]["rxpci"] == 2117
    assert rows[6]["pclk"] == 1771
    assert rows[1]["pclk"] == 1341  # the idle second card


def test_dmon_gtx1050ti_two_gpu_run() -> None:
    rows = parse_dmon(capture("dmon/gtx1050ti-x2-pucvmet-pwr-dash-b.txt"))
    assert len(rows) == 8
    gpu1 = [r for r in rows if r["gpu"] == 1]
    assert [r["sm"] for r in gpu1] == [89, 91, 87, 81]
    assert rows[0]["txpci"] == 259
    assert rows[-1]["temp"] == 50


def test_dmon_k40m_two_gpus() -> None:
    rows = parse_dmon(capture("dmon/k40m-2gpu-microway-zh.txt"))
    assert len(rows) == 2
    assert rows[1]["sm"] == 97
    assert rows[1]["gtemp"] == 31
    assert rows[0]["pwr"] == 43
    assert rows[0]["mclk"] == 2505


def test_dmon_morpheus_ramp_up() -> None:
    rows = parse_dmon(capture("dmon/morpheus-abp-nvsmi-default.txt"))
    assert len(rows) == 9
    assert [r["pwr"] for r in rows] == [70, 68, 69, 270, 274, 278, 279, 277, 281]
    assert rows[6]["sm"] == 99
    assert rows[3]["pclk"] == 1875


def test_dmon_irregular_columns_rtx3060ti() -> None:
    rows = parse_dmon(capture("dmon/rtx3060ti-default.txt"))
    assert len(rows) == 3
    assert rows[0] == {"gpu": 0, "pwr": 19, "gtemp": 41, "mtemp": None, "sm": 0, "mem": 0,
                       "enc": 0, "dec": 0, "mclk": 405, "pclk": 210}


def test_dmon_header_repeated_and_changed_mid_stream() -> None:
    # dmon reprints its header every so many rows; a driver update between two runs changes it.
    stream = (capture("dmon/morpheus-abp-nvsmi-default.txt")
              + capture("dmon/dgx-spark-gb10-wide-mclk-dash.txt")
              + capture("dmon/bogon-pucvmet-i1-c1-old-header.txt"))
    rows = parse_dmon(stream)
    assert len(rows) == 9 + 1 + 1
    assert "jpg" not in rows[8]
    assert rows[9]["jpg"] == 0
    assert rows[9]["pclk"] == 208
    assert rows[10]["rxpci"] == 577
    assert "gtemp" not in rows[10]


# ---------------------------------------------------------------- --query-gpu csv


def test_query_piped_through_column() -> None:
    rel = "query_gpu/2x-gtx1080-csv-piped-through-column.txt"
    rows = parse_query_csv(capture(rel))
    assert len(rows) == 2
    # nvidia-smi expanded the aliases clocks.gr / clocks.mem in its header.
    assert list(rows[0]) == ["index", "name", "power.draw", "temperature.gpu", "fan.speed",
                             "clocks.current.graphics", "clocks.current.memory"]
    assert rows[0]["name"] == "GeForce GTX 1080"
    assert rows[0]["power.draw"] == 131.17
    assert rows[1]["power.draw"] == 131.13
    assert rows[1]["clocks.current.graphics"] == 1721
    assert rows[0]["clocks.current.memory"] == 4873
    assert rows[0]["fan.speed"] == 70
    assert rows[1]["temperature.gpu"] == 35


def test_query_header_with_units_rtx3090() -> None:
    rows = parse_query_csv(capture("query_gpu/2x-rtx3090-driver515-csv-header.txt"))
    assert len(rows) == 2
    assert rows[0] == {"index": 0, "name": "NVIDIA GeForce RTX 3090",
                       "driver_version": "515.65.01", "temperature.gpu": 42,
                       "utilization.gpu": 1, "utilization.memory": 13, "memory.total": 24576,
                       "memory.used": 963}
    assert rows[1]["memory.used"] == 1
    assert rows[1]["temperature.gpu"] == 37


def test_query_noheader_not_supported_gtx770() -> None:
    rel = "query_gpu/gtx770-windows-noheader-not-supported.txt"
    fields = _queried_fields(rel)
    assert len(fields) == 12
    rows = parse_query_csv(capture(rel), fields=fields)
    assert len(rows) == 1
    row = rows[0]
    assert row["gpu_name"] == "GeForce GTX 770"
    assert row["temperature.gpu"] == 52
    assert row["fan.speed"] == 52
    assert row["pstate"] == "P0"
    for unsupported in ("utilization.gpu", "utilization.memory", "power.draw", "power.limit",
                        "clocks.current.graphics", "clocks.current.memory", "power.max_limit",
                        "power.default_limit"):
        assert row[unsupported] is None, unsupported


def test_query_noheader_nounits_na() -> None:
    rel = "query_gpu/i3pystatus-776-noheader-nounits-NA-vs-NotSupported.txt"
    rows = parse_query_csv(capture(rel), fields=_queried_fields(rel))
    assert rows == [{"memory.total": 2004, "memory.free": 2004, "memory.used": 0,
                     "temperature.gpu": 44, "fan.speed": None, "utilization.gpu": 0,
                     "utilization.memory": 0}]
    # The older driver's marker for the same slot reads the same.
    assert smi_value("[Not Supported]") is None


def test_query_header_names_differ_from_query_rtx2060() -> None:
    rows = parse_query_csv(capture("query_gpu/rtx2060-driver460-csv-header.txt"))
    assert len(rows) == 1
    row = rows[0]
    assert row["name"] == "GeForce RTX 2060"
    assert row["pci.bus_id"] == "00000000:09:00.0"
    assert row["driver_version"] == "460.91.03"
    assert (row["memory.total"], row["memory.free"], row["memory.used"]) == (5934, 5252, 682)
    assert row["clocks.current.graphics"] == 300
    assert row["clocks.max.graphics"] == 2160
    assert row["utilization.gpu"] == 20


def test_query_uuid_serial_na_rtx2060() -> None:
    rows = parse_query_csv(capture("query_gpu/rtx2060-perl-pod-index-name-uuid-serial-NA.txt"))
    assert rows == [{"index": 0, "name": "NVIDIA GeForce RTX 2060",
                     "uuid": "GPU-b188d724-7bb6-7e4b-a3a2-267815c40df3", "serial": None}]


def test_query_redacted_uuid_wsl2() -> None:
    rows = parse_query_csv(capture("query_gpu/rtx3080ti-wsl2-index-name-uuid-serial-NA.txt"))
    assert len(rows) == 1
    assert rows[0]["uuid"] == "GPU-9fcf2c75-c742-c00b-24df-xxxxxxxxx"
    assert rows[0]["serial"] is None
    assert rows[0]["name"] == "NVIDIA GeForce RTX 3080 Ti"


def test_query_noheader_unknown_query_reads_by_position() -> None:
    rel = "query_gpu/rtx3080-noheader-na-many.txt"
    assert "..." in capture_what(rel)  # the field list was never recorded
    rows = parse_query_csv(capture(rel))
    assert len(rows) == 1
    row = rows[0]
    assert len(row) == 27
    assert row["col0"] == "2021/08/31 11:37:40.983"
    assert row["col1"] == 0
    assert row["col2"] == "NVIDIA GeForce RTX 3080"
    assert row["col3"] == "GPU-8fe3a97d-51f6-a669-0d80-b4530b81b816"
    assert (row["col7"], row["col8"], row["col9"]) == (10240, 9029, 1211)
    assert row["col13"] == 54
    assert row["col20"] == "P3"
    assert sum(v is None for v in row.values()) == 16


def test_query_fields_given_with_header_present() -> None:
    text = capture("query_gpu/rtx2060-perl-pod-index-name-uuid-serial-NA.txt")
    rows = parse_query_csv(text, fields=["index", "name", "uuid", "serial"])
    assert len(rows) == 1  # the header line is not read as a GPU
    assert rows[0]["index"] == 0


# ---------------------------------------------------------------- clock reasons (-q)


def test_reasons_a10_event_era_full_q() -> None:
    gpus = parse_clock_reasons(
        capture("throttle/a10-driver550-full-q-hwslowdown-powerbrake-SOURCE-EDITED.txt"))
    assert len(gpus) == 1
    gpu = gpus[0]
    assert gpu["bus_id"] == "00000000:06:00.0"
    assert gpu["era"] == "event"
    assert gpu["active"] == ["idle", "hw_slowdown", "hw_power_brake_slowdown"]
    assert len(gpu["reasons"]) == 9
    assert gpu["reasons"]["display_clock_setting"] is False


def test_reasons_kubeflow_grep_excerpt_old_alignment() -> None:
    gpus = parse_clock_reasons(capture("throttle/kubeflow-68-grep-A8-idle.txt"))
    assert len(gpus) == 1
    assert gpus[0]["bus_id"] is None
    assert gpus[0]["era"] == "throttle"
    assert gpus[0]["active"] == ["idle"]
    assert "display_clock_setting" not in gpus[0]["reasons"]
    assert len(gpus[0]["reasons"]) == 8


def test_reasons_mangohud_performance_only() -> None:
    gpus = parse_clock_reasons(capture("throttle/mangohud-636-driver495-idle.txt"))
    assert [(g["bus_id"], g["era"], g["active"]) for g in gpus] == [
        ("00000000:0E:00.0", "throttle", ["idle"])]
    assert gpus[0]["reasons"]["sw_thermal_slowdown"] is False


def test_reasons_rtx2080_sw_power_cap() -> None:
    gpus = parse_clock_reasons(
        capture("throttle/rtx2080-driver535era-q-gpu-block-swpowercap.txt"))
    assert len(gpus) == 1
    assert gpus[0]["bus_id"] == "00000000:02:00.0"
    assert gpus[0]["era"] == "event"
    assert gpus[0]["active"] == ["sw_power_cap"]
    assert gpus[0]["reasons"]["idle"] is False


def test_reasons_v100_excerpt_stops_at_blank_line() -> None:
    gpus = parse_clock_reasons(capture("throttle/v100-sxm2-c4130-powerbrake-excerpt.txt"))
    assert len(gpus) == 1
    assert gpus[0]["active"] == ["hw_slowdown", "hw_power_brake_slowdown"]
    # The Clocks block after the blank line is not read as reasons.
    assert set(gpus[0]["reasons"]) == {"idle", "applications_clocks_setting", "sw_power_cap",
                                       "hw_slowdown", "hw_thermal_slowdown",
                                       "hw_power_brake_slowdown"}


def test_reasons_two_gpus_in_one_log() -> None:
    text = (capture("throttle/rtx2080-driver535era-q-gpu-block-swpowercap.txt")
            + capture("throttle/mangohud-636-driver495-idle.txt"))
    gpus = parse_clock_reasons(text)
    assert [g["bus_id"] for g in gpus] == ["00000000:02:00.0", "00000000:0E:00.0"]
    assert [g["active"] for g in gpus] == [["sw_power_cap"], ["idle"]]


# ---------------------------------------------------------------- plain table


def test_table_grid_k520_no_processes() -> None:
    table = parse_nvsmi_table(capture("nvsmi_table/driver367-grid-k520-no-processes-a.txt"))
    assert table["driver_version"] == "367.57"
    assert table["cuda_version"] is None
    assert table["processes_state"] == "none_found"
    assert table["processes"] == []
    (gpu,) = table["gpus"]
    assert (gpu["index"], gpu["name"], gpu["bus_id"]) == (0, "GRID K520", "0000:00:03.0")
    assert (gpu["power_w"], gpu["power_limit_w"], gpu["temp_c"], gpu["perf"]) == (45, 125, 54,
                                                                                  "P0")
    assert (gpu["mem_used_mib"], gpu["mem_total_mib"], gpu["util_gpu_pct"]) == (0, 4036, 0)
    assert gpu["fan_pct"] is None


def test_table_grid_k520_in_docker_idle() -> None:
    table = parse_nvsmi_table(
        capture("nvsmi_table/driver367-grid-k520-no-processes-b-in-docker.txt"))
    (gpu,) = table["gpus"]
    assert gpu["perf"] == "P8"
    assert gpu["power_w"] == 18
    assert table["processes_state"] == "none_found"


def test_table_gtx1050ti_truncated_before_processes() -> None:
    table = parse_nvsmi_table(capture("nvsmi_table/driver390-gtx1050ti-x2-b.txt"))
    assert table["processes_state"] == "missing"
    assert [g["index"] for g in table["gpus"]] == [0, 1]
    assert [g["bus_id"] for g in table["gpus"]] == ["00000000:02:00.0", "00000000:03:00.0"]
    assert all(g["power_w"] is None for g in table["gpus"])
    assert [g["power_limit_w"] for g in table["gpus"]] == [75, 75]
    assert [g["util_gpu_pct"] for g in table["gpus"]] == [90, 91]
    assert [g["mem_total_mib"] for g in table["gpus"]] == [4039, 4040]
    assert table["gpus"][0]["name"] == "GeForce GTX 105..."
    assert table["gpus"][1]["fan_pct"] == 17


def test_table_gtx1070_truncated_process_rows() -> None:
    table = parse_nvsmi_table(
        capture("nvsmi_table/driver396-gtx1070-with-processes-TRUNCATED.txt"))
    assert table["processes_state"] == "listed"
    assert [(p["pid"], p["type"], p["name"], p["used_mib"]) for p in table["processes"]] == [
        (489, "G", "/usr/bin/X", 1025), (662, "G", "kwin_x11", 313),
        (668, "G", "/usr/bin/krunner", 3)]
    (gpu,) = table["gpus"]
    assert gpu["display_active"] == "On"
    assert (gpu["mem_used_mib"], gpu["mem_total_mib"]) == (1917, 8114)


def test_table_gtx1080_gi_ci_columns() -> None:
    table = parse_nvsmi_table(capture("nvsmi_table/driver460-gtx1080-with-processes.txt"))
    assert (table["driver_version"], table["cuda_version"]) == ("460.32.03", "11.2")
    assert [(p["gpu"], p["gi"], p["ci"], p["pid"], p["name"], p["used_mib"])
            for p in table["processes"]] == [
        (0, None, None, 1335, "/usr/libexec/Xorg", 56),
        (0, None, None, 1476, "/usr/bin/gnome-shell", 6)]
    (gpu,) = table["gpus"]
    assert (gpu["power_w"], gpu["power_limit_w"], gpu["mem_used_mib"]) == (7, 230, 65)
    assert gpu["mig_mode"] is None


def test_table_8x_h100_with_processes() -> None:
    table = parse_nvsmi_table(capture("nvsmi_table/driver535-8xH100-with-processes.txt"))
    assert len(table["gpus"]) == 8
    assert {g["name"] for g in table["gpus"]} == {"NVIDIA H100 80GB HBM3"}
    assert [g["power_w"] for g in table["gpus"]] == [259, 264, 266, 268, 246, 249, 263, 245]
    assert table["gpus"][7]["bus_id"] == "00000000:DF:00.0"
    assert table["gpus"][0]["mem_used_mib"] == 18449
    assert table["gpus"][0]["ecc_uncorrected"] == 0
    assert table["gpus"][0]["mig_mode"] == "Disabled"
    assert [p["pid"] for p in table["processes"]] == list(range(3375095, 3375103))
    assert [p["gpu"] for p in table["processes"]] == list(range(8))
    assert table["processes"][0]["used_mib"] == 18430
    assert {p["type"] for p in table["processes"]} == {"C"}


def test_table_rtx5090_wide_layout_no_processes() -> None:
    table = parse_nvsmi_table(capture("nvsmi_table/driver570-rtx5090-no-processes.txt"))
    assert table["driver_version"] == "570.124.06"
    assert table["processes_state"] == "none_found"
    (gpu,) = table["gpus"]
    assert gpu["bus_id"] == "00000000:02:00.0"
    assert (gpu["power_w"], gpu["power_limit_w"]) == (24, 575)
    assert (gpu["mem_used_mib"], gpu["mem_total_mib"]) == (2, 32607)


def test_table_rtx2060_595_border_and_cut_box() -> None:
    table = parse_nvsmi_table(capture("nvsmi_table/driver595-rtx2060-TRUNCATED.txt"))
    assert (table["driver_version"], table["cuda_version"]) == ("595.71.05", "13.2")
    (gpu,) = table["gpus"]
    assert (gpu["name"], gpu["fan_pct"], gpu["temp_c"], gpu["power_w"]) == (
        "NVIDIA GeForce RTX 2060", 49, 53, 65)
    assert gpu["util_gpu_pct"] == 7
    # The capture ends inside the box header: not "no processes", just unknown.
    assert table["processes_state"] == "cut"


def test_table_box_only_empty_in_container() -> None:
    table = parse_nvsmi_table(capture("nvsmi_table/processes-box-only-empty-in-container.txt"))
    assert table["gpus"] == []
    assert table["processes"] == []
    assert table["processes_state"] == "empty"


def test_table_box_only_no_running_processes() -> None:
    table = parse_nvsmi_table(capture("nvsmi_table/processes-box-only-no-running-440era.txt"))
    assert table["processes_state"] == "none_found"
    assert table["processes"] == []
