"""django-q2's schedule and task admin run code on the worker: only superusers reach them."""

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django_q.models import Schedule

from accounts.models import User

PAGES = [
    "/admin/django_q/schedule/",
    "/admin/django_q/schedule/add/",
    "/admin/django_q/success/",
    "/admin/django_q/failure/",
]


@pytest.fixture
def staff_with_every_q_permission(db) -> Client:
    staff = User.objects.create_user(email="ops@gshost.test", password="ops-pw-123", is_staff=True)
    staff.user_permissions.set(Permission.objects.filter(content_type__app_label="django_q"))
    client = Client()
    client.force_login(staff)
    return client


@pytest.mark.parametrize("page", PAGES)
def test_staff_without_superuser_cannot_reach_the_task_admin(staff_with_every_q_permission, page):
    assert staff_with_every_q_permission.get(page).status_code == 403


def test_staff_without_superuser_cannot_add_a_schedule(staff_with_every_q_permission):
    staff_with_every_q_permission.post(
        "/admin/django_q/schedule/add/",
        {"func": "os.system", "args": "'touch /tmp/owned'", "schedule_type": "O", "repeats": "-1"},
    )
    assert not Schedule.objects.filter(func="os.system").exists()


def test_the_admin_index_does_not_list_it_for_them(staff_with_every_q_permission):
    index = staff_with_every_q_permission.get("/admin/").content.decode()
    assert "django_q/schedule" not in index


@pytest.mark.parametrize("page", PAGES)
def test_a_superuser_reaches_it(db, page):
    root = User.objects.create_superuser(email="root@gshost.test", password="root-pw-123")
    client = Client()
    client.force_login(root)
    assert client.get(page).status_code == 200
