"""The node protocol's messages (gshost_agent.protocol): each one's body, exactly as it goes on
the wire, read back to the same message; a body not of its shape is one ProtocolError, naming
the member at fault; members a message does not know are ignored."""

from datetime import UTC, datetime
from typing import Any

import pytest

from gshost_agent.protocol import (
    PLAN_BOUNDS,
    ArchiveReceipt,
    Capacity,
    ConsoleChecks,
    ConsoleOutput,
    Heartbeat,
    HeartbeatAnswer,
    JobKind,
    JobRequest,
    Minute,
    OutputLine,
    PartUrls,
    PartUrlsRequest,
    Plan,
    Player,
    ProtocolError,
    Reading,
    Report,
    ReportKind,
    ServerState,
    SftpEndpoint,
    StartRequest,
    Stats,
    TransferExpected,
    TransferFetch,
    TransferSend,
    format_time,
    parse_moment,
    server_route,
    transfer_route,
)

SERVER = "srv_0123456789abcdefABCD"
TOKEN = "t" * 43  # a transfer token
TEN = datetime(2026, 11, 26, 10, 0, tzinfo=UTC)
TEN_PAST = datetime(2026, 11, 26, 10, 10, 5, tzinfo=UTC)

MINUTE = Minute(at=TEN, cpu_percent=2.5, memory_mb=101.0, players_online=1)
MINUTE_JSON = {"at": "2026-11-26T10:00:00Z", "cpu_percent": 2.5, "memory_mb": 101.0,
               "players_online": 1}  # fmt: skip

STATS = Stats(
    state=ServerState.RUNNING,
    sampled_at=TEN_PAST,
    cpu_percent=12.5,
    memory_mb=301.2,
    memory_limit_mb=1024,
    disk_mb=12.34,
    players_online=1,
    uptime_seconds=605,
)
STATS_JSON = {
    "state": "running",
    "sampled_at": "2026-11-26T10:10:05Z",
    "cpu_percent": 12.5,
    "memory_mb": 301.2,
    "memory_limit_mb": 1024,
    "disk_mb": 12.34,
    "network_in_kbps": None,
    "network_out_kbps": None,
    "players_online": 1,
    "uptime_seconds": 605,
}

READING = Reading(
    settings={"max_players": "20", "motd": "hi"},
    stats=STATS,
    players=(Player("alice", TEN),),
    max_players=20,
    minutes=(MINUTE,),
)
READING_JSON = {
    "settings": {"max_players": "20", "motd": "hi"},
    **STATS_JSON,
    "players": [{"name": "alice", "joined_at": "2026-11-26T10:00:00Z"}],
    "max_players": 20,
    "minutes": [MINUTE_JSON],
}
STOPPED_READING = Reading(settings={"motd": "hi"}, minutes=(MINUTE,))
STOPPED_READING_JSON = {"settings": {"motd": "hi"}, "minutes": [MINUTE_JSON]}

HEARTBEAT = Heartbeat(
    agent_version="0.9.0",
    outbox_id="obx_0123456789abcdef01234567",
    isolation="sandboxed: namespaces (pid, ipc, mount, net), cgroups, own uid/gid",
    servers={SERVER: ServerState.RUNNING},
    games=("demo", "freeciv"),
    game_capabilities={"demo": ("backups", "console"), "freeciv": ()},
    capacity=Capacity(memory_mb=8192, disk_mb=100_000, cpu_percent=400),
    readings={SERVER: READING_JSON},
    sftp=SftpEndpoint(port=2022, fingerprint="SHA256:q3C5cTpOdGdbb0dFFeTpbb1HYKC5Mk1Z8xW3T3fD7Ok"),
    withdrawals_taken=(7, 9),
)
HEARTBEAT_JSON = {
    "agent_version": "0.9.0",
    "outbox_id": "obx_0123456789abcdef01234567",
    "isolation": "sandboxed: namespaces (pid, ipc, mount, net), cgroups, own uid/gid",
    "servers": {SERVER: "running"},
    "games": ["demo", "freeciv"],
    "game_capabilities": {"demo": ["backups", "console"], "freeciv": []},
    "capacity": {"memory_mb": 8192, "disk_mb": 100_000, "cpu_percent": 400},
    "readings": {SERVER: READING_JSON},
    "sftp": {"port": 2022, "fingerprint": "SHA256:q3C5cTpOdGdbb0dFFeTpbb1HYKC5Mk1Z8xW3T3fD7Ok"},
    "withdrawals_taken": [7, 9],
}
# An agent of before: no templates, capabilities, isolation, capacity, readings, SFTP or
# withdrawals taken.
BARE_HEARTBEAT = Heartbeat(agent_version="0.1.0", servers={})
BARE_HEARTBEAT_JSON = {
    "agent_version": "0.1.0",
    "servers": {},
    "capacity": {"memory_mb": None, "disk_mb": None, "cpu_percent": None},
    "readings": {},
}

JWK = {"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo",
       "kid": "k1", "alg": "EdDSA", "use": "sig"}  # fmt: skip
WITHDRAWAL_JSON = {"id": 7, "reason": "password_changed", "issued_at": "2026-11-26T10:00:00Z",
                   "servers": [], "keys": [], "people": ["42"]}  # fmt: skip
ANSWER = HeartbeatAnswer(
    node="node-1",
    console=ConsoleChecks(keys=(JWK,), origins=("https://panel.example.com",)),
    withdrawals=(WITHDRAWAL_JSON,),
)
ANSWER_JSON = {
    "node": "node-1",
    "console": {"keys": [JWK], "origins": ["https://panel.example.com"]},
    "withdrawals": [WITHDRAWAL_JSON],
}

CRASH = Report(
    outbox_id="obx_0123456789abcdef01234567",
    seq=7,
    server_id=SERVER,
    kind=ReportKind.CRASHED,
    at=TEN,
    pid=4242,
    exit_code=None,
    signal=9,
    oom=True,
    last_output=("Loading world", "Killed"),
    reason="disk_limit",
)
CRASH_JSON = {
    "outbox_id": "obx_0123456789abcdef01234567",
    "seq": 7,
    "server_id": SERVER,
    "kind": "crashed",
    "at": "2026-11-26T10:00:00Z",
    "pid": 4242,
    "exit_code": None,
    "signal": 9,
    "oom": True,
    "last_output": ["Loading world", "Killed"],
    "reason": "disk_limit",
}
READY = Report(outbox_id="obx_1", seq=1, server_id=SERVER, kind=ReportKind.READY, at=TEN, pid=9)
READY_JSON = {
    "outbox_id": "obx_1",
    "seq": 1,
    "server_id": SERVER,
    "kind": "ready",
    "at": "2026-11-26T10:00:00Z",
    "pid": 9,
    "exit_code": None,
    "signal": None,
    "oom": False,
    "last_output": [],
}
PROGRESS = Report(outbox_id="obx_1", seq=2, server_id=SERVER, kind=ReportKind.JOB_PROGRESS,
                  at=TEN, job_id="job_abc", progress=40)  # fmt: skip
PROGRESS_JSON = {
    "outbox_id": "obx_1",
    "seq": 2,
    "server_id": SERVER,
    "kind": "job_progress",
    "at": "2026-11-26T10:00:00Z",
    "job_id": "job_abc",
    "progress": 40,
}
FINISHED = Report(
    outbox_id="obx_1",
    seq=3,
    server_id=SERVER,
    kind=ReportKind.JOB_FINISHED,
    at=TEN,
    job_id="job_abc",
    succeeded=True,
    error=None,
    size_bytes=1_048_576,
    sha256="a" * 64,
)
FINISHED_JSON = {
    "outbox_id": "obx_1",
    "seq": 3,
    "server_id": SERVER,
    "kind": "job_finished",
    "at": "2026-11-26T10:00:00Z",
    "job_id": "job_abc",
    "succeeded": True,
    "error": None,
    "size_bytes": 1_048_576,
    "sha256": "a" * 64,
}
RENAMED = Report(outbox_id="obx_1", seq=4, server_id=SERVER, kind=ReportKind.FILES_CHANGED, at=TEN,
                 person_id="42", change="files.rename", paths=("/a.txt", "/b.txt"))  # fmt: skip
RENAMED_JSON = {
    "outbox_id": "obx_1",
    "seq": 4,
    "server_id": SERVER,
    "kind": "files_changed",
    "at": "2026-11-26T10:00:00Z",
    "person_id": "42",
    "change": "files.rename",
    "paths": ["/a.txt", "/b.txt"],
}

RESTORE = JobRequest(job_id="job_abc", kind=JobKind.RESTORE, game="demo", backup_id="bkp_abc",
                     sha256="b" * 64, disk_mb=2048, download_url="https://bucket/a",
                     size_bytes=5000)  # fmt: skip
RESTORE_JSON = {"job_id": "job_abc", "kind": "restore", "game": "demo", "backup_id": "bkp_abc",
                "sha256": "b" * 64, "disk_mb": 2048, "download_url": "https://bucket/a",
                "size_bytes": 5000}  # fmt: skip
BACKUP = JobRequest(job_id="job_abc", kind=JobKind.BACKUP, game="demo", backup_id="bkp_abc",
                    storage="object_storage")  # fmt: skip
BACKUP_JSON = {"job_id": "job_abc", "kind": "backup", "game": "demo", "backup_id": "bkp_abc",
               "storage": "object_storage"}  # fmt: skip
REINSTALL = JobRequest(job_id="job_abc", kind=JobKind.REINSTALL, game="demo",
                       settings={"motd": "hi"})  # fmt: skip
REINSTALL_JSON = {"job_id": "job_abc", "kind": "reinstall", "game": "demo",
                  "settings": {"motd": "hi"}}  # fmt: skip
EMPTY_REINSTALL = JobRequest(job_id="job_abc", kind=JobKind.REINSTALL, game="demo",
                             empty=True)  # fmt: skip
EMPTY_REINSTALL_JSON = {"job_id": "job_abc", "kind": "reinstall", "game": "demo",
                        "settings": {}, "empty": True}  # fmt: skip

START = StartRequest(game="demo", port=27015, memory_mb=256, settings={"motd": "hi"},
                     disk_mb=2048, cpu_percent=50, processes=64)  # fmt: skip
START_JSON = {"game": "demo", "port": 27015, "memory_mb": 256, "disk_mb": 2048,
              "cpu_percent": 50, "processes": 64, "settings": {"motd": "hi"}}  # fmt: skip

EXAMPLES = [
    (MINUTE, MINUTE_JSON),
    (STATS, STATS_JSON),
    (Player("alice", TEN), {"name": "alice", "joined_at": "2026-11-26T10:00:00Z"}),
    (READING, READING_JSON),
    (STOPPED_READING, STOPPED_READING_JSON),
    (Capacity(8192, None, 400), {"memory_mb": 8192, "disk_mb": None, "cpu_percent": 400}),
    (HEARTBEAT, HEARTBEAT_JSON),
    (BARE_HEARTBEAT, BARE_HEARTBEAT_JSON),
    (ANSWER, ANSWER_JSON),
    (HeartbeatAnswer(node="node-1"), {"node": "node-1"}),
    (HeartbeatAnswer(node="node-1", console=ConsoleChecks(), withdrawals=()),
     {"node": "node-1", "console": {"keys": [], "origins": []}, "withdrawals": []}),
    (SftpEndpoint(), {"port": None, "fingerprint": None}),
    (CRASH, CRASH_JSON),
    (READY, READY_JSON),
    (PROGRESS, PROGRESS_JSON),
    (FINISHED, FINISHED_JSON),
    (RENAMED, RENAMED_JSON),
    (START, START_JSON),
    (RESTORE, RESTORE_JSON),
    (BACKUP, BACKUP_JSON),
    (REINSTALL, REINSTALL_JSON),
    (EMPTY_REINSTALL, EMPTY_REINSTALL_JSON),
    (JobRequest(job_id="job_abc", kind=JobKind.WIPE, game="demo"),
     {"job_id": "job_abc", "kind": "wipe", "game": "demo"}),
    (Plan(), {"memory_mb": 1024, "disk_mb": 10240, "cpu_percent": 100, "processes": 256}),
    (ConsoleOutput((OutputLine(7, "Loading world"), OutputLine(8, "output throttled", True)), 8),
     {"lines": [{"n": 7, "text": "Loading world"},
                {"n": 8, "text": "output throttled", "daemon": True}], "last": 8}),
    (TransferExpected(token=TOKEN, game="demo", valid_seconds=600, disk_mb=2048),
     {"token": TOKEN, "game": "demo", "valid_seconds": 600, "disk_mb": 2048}),
    (TransferSend(target_url="https://10.0.0.2:8444", target_ca="", token=TOKEN),
     {"target_url": "https://10.0.0.2:8444", "target_ca": "", "token": TOKEN}),
    (TransferFetch(url="https://bucket/a", sha256="c" * 64, size_bytes=5000),
     {"url": "https://bucket/a", "sha256": "c" * 64, "size_bytes": 5000}),
    (ArchiveReceipt(size_bytes=5000, sha256="c" * 64), {"size_bytes": 5000, "sha256": "c" * 64}),
    (PartUrlsRequest("bkp_abc", 1, 16), {"backup_id": "bkp_abc", "first": 1, "count": 16}),
    (PartUrls(("https://bucket/1", "https://bucket/2")),
     {"urls": ["https://bucket/1", "https://bucket/2"]}),
]  # fmt: skip


@pytest.mark.parametrize(("message", "body"), EXAMPLES, ids=lambda v: type(v).__name__)
def test_each_message_is_its_body_and_reads_back_as_itself(message: Any, body: Any) -> None:
    assert message.to_json() == body
    assert type(message).from_json(message.to_json()) == message


@pytest.mark.parametrize(("message", "body"), EXAMPLES, ids=lambda v: type(v).__name__)
def test_a_member_a_message_does_not_know_is_ignored(message: Any, body: Any) -> None:
    assert type(message).from_json({**body, "added_by_a_newer_version": [1]}) == message


@pytest.mark.parametrize(
    "wrong",
    [
        {"change": "files.chmod"},
        {"paths": ["/a.txt"]},
        {"paths": ["/../x", "/b"]},
        {"person_id": 7},
    ],
)
def test_a_files_changed_report_names_a_known_change_and_its_paths(wrong: dict[str, Any]) -> None:
    with pytest.raises(ProtocolError):
        Report.from_json({**RENAMED_JSON, **wrong})


def test_a_heartbeat_reads_its_readings_minutes() -> None:
    assert Heartbeat.from_json(HEARTBEAT_JSON).minutes == {SERVER: (MINUTE,)}


def test_a_start_without_a_plan_asks_for_the_default_one() -> None:
    start = StartRequest.from_json({"game": "demo", "port": 27015})
    assert start.plan == Plan() and start.settings == {}


def test_a_report_s_output_is_cut_and_its_control_characters_dropped() -> None:
    body = {**CRASH_JSON, "last_output": [f"line {n}\x00\x1b[0m" for n in range(12)] + ["x" * 300]}
    lines = Report.from_json(body).last_output
    assert len(lines) == 10 and lines[0] == "line 3[0m" and lines[-1] == "x" * 200


def test_a_job_s_error_is_cut_to_500_characters() -> None:
    body = {**FINISHED_JSON, "succeeded": False, "error": "e" * 600}
    assert Report.from_json(body).error == "e" * 500


def test_times_are_written_to_the_second_in_utc_and_read_with_any_offset() -> None:
    assert format_time(datetime(2026, 11, 26, 11, 0, 0, 999, tzinfo=UTC)) == "2026-11-26T11:00:00Z"
    assert parse_moment("2026-11-26T12:00:00+01:00") == datetime(2026, 11, 26, 11, tzinfo=UTC)
    assert parse_moment("2026-11-26T11:00:00") is None  # no offset: not a protocol time


def test_the_routes_are_built_with_the_server_id_quoted() -> None:
    assert server_route(SERVER) == f"/v1/servers/{SERVER}"
    assert server_route(SERVER, "start") == f"/v1/servers/{SERVER}/start"
    assert transfer_route(SERVER, "commit") == f"/v1/transfers/{SERVER}/commit"
    assert server_route("srv_a/../b", "stop") == "/v1/servers/srv_a%2F..%2Fb/stop"


@pytest.mark.parametrize("name", list(PLAN_BOUNDS))
def test_a_plan_takes_its_bounds_and_refuses_one_beyond(name: str) -> None:
    least, most = PLAN_BOUNDS[name]
    assert getattr(Plan.from_json({name: least}), name) == least
    assert getattr(Plan.from_json({name: most}), name) == most
    for beyond in (least - 1, most + 1, True, "1"):
        with pytest.raises(ProtocolError) as refused:
            Plan.from_json({name: beyond})
        assert refused.value.field == name


MALFORMED = [
    (Minute, {**MINUTE_JSON, "at": "2026-11-26T10:00:30Z"}, "minutes"),
    (Minute, {**MINUTE_JSON, "cpu_percent": -1}, "minutes"),
    (Minute, {**MINUTE_JSON, "players_online": 1.5}, "minutes"),
    (Stats, {**STATS_JSON, "sampled_at": "yesterday"}, "readings"),
    (Stats, {**STATS_JSON, "memory_mb": "a lot"}, "readings"),
    (Reading, {**READING_JSON, "players": [{"name": "a\nb", "joined_at": "2026-11-26T10:00:00Z"}]},
     "readings"),
    (Reading, {**READING_JSON, "players": [{}] * 101}, "readings"),
    (Reading, {**READING_JSON, "minutes": [MINUTE_JSON] * 61}, "minutes"),
    (Heartbeat, [], "body"),
    (Heartbeat, {**HEARTBEAT_JSON, "agent_version": 3}, "agent_version"),
    (Heartbeat, {k: v for k, v in HEARTBEAT_JSON.items() if k != "servers"}, "servers"),
    (Heartbeat, {**HEARTBEAT_JSON, "servers": {SERVER: "exploded"}}, "servers"),
    (Heartbeat, {**HEARTBEAT_JSON, "servers": {"nope": "running"}}, "servers"),
    (Heartbeat, {**HEARTBEAT_JSON, "outbox_id": ""}, "outbox_id"),
    (Heartbeat, {**HEARTBEAT_JSON, "isolation": "x" * 101}, "isolation"),
    (Heartbeat, {**HEARTBEAT_JSON, "games": ["Not A Name"]}, "games"),
    (Heartbeat, {**HEARTBEAT_JSON, "game_capabilities": {"demo": "x"}}, "game_capabilities"),
    (Heartbeat, {**HEARTBEAT_JSON, "capacity": {"memory_mb": -1}}, "capacity"),
    (Heartbeat, {**HEARTBEAT_JSON, "readings": "x"}, "readings"),
    (Heartbeat, {**HEARTBEAT_JSON, "readings": {SERVER: {"minutes": "x"}}}, "minutes"),
    (Heartbeat, {**HEARTBEAT_JSON, "sftp": 2022}, "sftp"),
    (Heartbeat, {**HEARTBEAT_JSON, "sftp": {"port": 0, "fingerprint": None}}, "sftp"),
    (Heartbeat, {**HEARTBEAT_JSON, "sftp": {"port": 22, "fingerprint": "MD5:ab"}}, "sftp"),
    (Heartbeat, {**HEARTBEAT_JSON, "withdrawals_taken": ["7"]}, "withdrawals_taken"),
    (Heartbeat, {**HEARTBEAT_JSON, "withdrawals_taken": [True]}, "withdrawals_taken"),
    (Heartbeat, {**HEARTBEAT_JSON, "withdrawals_taken": [1] * 1001}, "withdrawals_taken"),
    (HeartbeatAnswer, {"node": 1}, "node"),
    (HeartbeatAnswer, {**ANSWER_JSON, "console": []}, "console"),
    (HeartbeatAnswer, {**ANSWER_JSON, "console": {"keys": ["k1"], "origins": []}}, "console"),
    (HeartbeatAnswer, {**ANSWER_JSON, "console": {"keys": [], "origins": "https://x"}}, "console"),
    (HeartbeatAnswer, {**ANSWER_JSON, "withdrawals": {"id": 7}}, "withdrawals"),
    (HeartbeatAnswer, {**ANSWER_JSON, "withdrawals": [7]}, "withdrawals"),
    (Report, {**CRASH_JSON, "seq": 0}, "seq"),
    (Report, {**CRASH_JSON, "kind": "exploded"}, "kind"),
    (Report, {**CRASH_JSON, "server_id": "not-a-server"}, "server_id"),
    (Report, {**CRASH_JSON, "at": "2026-11-26T10:00:00"}, "at"),
    (Report, {**CRASH_JSON, "signal": 9.5}, "signal"),
    (Report, {**CRASH_JSON, "oom": "no"}, "oom"),
    (Report, {**CRASH_JSON, "last_output": [1]}, "last_output"),
    (Report, {**CRASH_JSON, "reason": "bored"}, "reason"),
    (Report, {**PROGRESS_JSON, "progress": 101}, "progress"),
    (Report, {**PROGRESS_JSON, "job_id": "bkp_1"}, "job_id"),
    (Report, {**FINISHED_JSON, "succeeded": None}, "succeeded"),
    (Report, {**FINISHED_JSON, "sha256": "A" * 64}, "sha256"),
    (Report, {**FINISHED_JSON, "size_bytes": -1}, "size_bytes"),
    (StartRequest, {**START_JSON, "game": None}, "game"),
    (StartRequest, {**START_JSON, "port": 65536}, "port"),
    (StartRequest, {**START_JSON, "settings": []}, "settings"),
    (StartRequest, {**START_JSON, "memory_mb": 31}, "memory_mb"),
    (JobRequest, {**BACKUP_JSON, "kind": "defrag"}, "kind"),
    (JobRequest, {**BACKUP_JSON, "backup_id": None}, "backup_id"),
    (JobRequest, {**BACKUP_JSON, "storage": "tape"}, "storage"),
    (JobRequest, {**RESTORE_JSON, "sha256": "b" * 63}, "sha256"),
    (JobRequest, {**RESTORE_JSON, "disk_mb": 0}, "disk_mb"),
    (JobRequest, {**RESTORE_JSON, "download_url": "ftp://bucket/a"}, "download_url"),
    (JobRequest, {**RESTORE_JSON, "size_bytes": 0}, "size_bytes"),
    (JobRequest, {**REINSTALL_JSON, "settings": "motd=hi"}, "settings"),
    (JobRequest, {**REINSTALL_JSON, "empty": "yes"}, "empty"),
    (ConsoleOutput, {"lines": [{"n": 0, "text": "x"}], "last": 1}, "lines"),
    (ConsoleOutput, {"lines": [{"n": 1, "text": None}], "last": 1}, "lines"),
    (ConsoleOutput, {"lines": [], "last": "1"}, "last"),
    (TransferExpected, {"token": "short", "game": "demo", "valid_seconds": 600}, "token"),
    (TransferExpected, {"token": TOKEN, "game": "demo", "valid_seconds": 0}, "valid_seconds"),
    (TransferExpected, {"token": TOKEN, "game": "demo", "valid_seconds": 1, "disk_mb": 0},
     "disk_mb"),
    (TransferSend, {"target_url": "http://10.0.0.2", "target_ca": "", "token": TOKEN},
     "target_url"),
    (TransferFetch, {"url": "https://bucket/a", "sha256": "c" * 64, "size_bytes": 0},
     "size_bytes"),
    (ArchiveReceipt, {"size_bytes": 5000}, "sha256"),
    (PartUrlsRequest, {"backup_id": "bkp_abc", "first": 0, "count": 1}, "first"),
    (PartUrlsRequest, {"backup_id": "bkp_abc", "first": 1, "count": 65}, "count"),
    (PartUrls, {"urls": [1]}, "urls"),
]  # fmt: skip


@pytest.mark.parametrize(("message", "body", "field"), MALFORMED)
def test_a_malformed_body_is_one_protocol_error_naming_its_member(
    message: Any, body: Any, field: str
) -> None:
    with pytest.raises(ProtocolError) as refused:
        message.from_json(body)
    assert refused.value.field == field
    assert isinstance(refused.value, ValueError)
