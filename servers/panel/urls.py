"""Panel routes for servers, mounted at /panel/servers/. Trailing slashes are optional."""

from django.urls import re_path

from servers.panel import data, files, schedules, views

app_name = "servers_panel"

SERVER = r"(?P<server_id>srv_[0-9A-Za-z]{1,40})"
SCHEDULE = r"(?P<schedule_id>sch_[0-9A-Za-z]{1,40})"
BACKUP = r"(?P<backup_id>bkp_[0-9A-Za-z]{1,40})"
EVENT = r"(?P<event_id>cfg_[0-9A-Za-z]{1,40})"

urlpatterns = [
    re_path(r"^$", views.server_list, name="list"),
    re_path(r"^states/?$", views.server_states, name="states"),
    re_path(rf"^{SERVER}/?$", views.server_detail, name="detail"),
    re_path(rf"^{SERVER}/power/?$", views.server_power_page, name="power"),
    re_path(rf"^{SERVER}/console/?$", views.server_console_page, name="console"),
    re_path(
        rf"^{SERVER}/crash-restarts/?$", views.server_crash_restarts_page, name="crash_restarts"
    ),
    re_path(rf"^{SERVER}/console/session/?$", views.server_console_session, name="console_session"),
    re_path(rf"^{SERVER}/console/lines/?$", views.server_console_lines, name="console_lines"),
    re_path(rf"^{SERVER}/schedules/?$", schedules.schedule_list, name="schedules"),
    re_path(rf"^{SERVER}/schedules/new/?$", schedules.schedule_create_page, name="schedule_new"),
    re_path(
        rf"^{SERVER}/schedules/{SCHEDULE}/edit/?$",
        schedules.schedule_edit_page,
        name="schedule_edit",
    ),
    re_path(
        rf"^{SERVER}/schedules/{SCHEDULE}/toggle/?$",
        schedules.schedule_toggle_page,
        name="schedule_toggle",
    ),
    re_path(
        rf"^{SERVER}/schedules/{SCHEDULE}/run/?$", schedules.schedule_run_page, name="schedule_run"
    ),
    re_path(
        rf"^{SERVER}/schedules/{SCHEDULE}/delete/?$",
        schedules.schedule_delete_page,
        name="schedule_delete",
    ),
    re_path(rf"^{SERVER}/files/?$", files.files_page, name="files"),
    re_path(rf"^{SERVER}/files/edit/?$", files.file_edit_page, name="file_edit"),
    re_path(rf"^{SERVER}/files/download/?$", files.file_download_page, name="file_download"),
    re_path(
        rf"^{SERVER}/files/upload-link/?$",
        files.files_upload_link_page,
        name="files_upload_link",
    ),
    re_path(rf"^{SERVER}/files/change/?$", files.files_change_page, name="files_change"),
    re_path(rf"^{SERVER}/files/delete/?$", files.files_delete_page, name="files_delete"),
    re_path(rf"^{SERVER}/backups/?$", data.backups_page, name="backups"),
    re_path(rf"^{SERVER}/backups/new/?$", data.backup_create_page, name="backup_new"),
    re_path(
        rf"^{SERVER}/backups/{BACKUP}/restore/?$", data.backup_restore_page, name="backup_restore"
    ),
    re_path(rf"^{SERVER}/maintenance/?$", data.maintenance_page, name="maintenance"),
    re_path(rf"^{SERVER}/settings/?$", data.settings_page, name="settings"),
    re_path(rf"^{SERVER}/config-events/?$", data.config_events_page, name="config_events"),
    re_path(
        rf"^{SERVER}/config-events/{EVENT}/end/?$",
        data.config_event_end_page,
        name="config_event_end",
    ),
]
