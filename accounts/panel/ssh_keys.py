"""Account -> SSH keys: the public keys a person signs in to SFTP with; add one, remove one."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from accounts.errors import SshKeyNotFound, SshKeyRefused
from accounts.models import User
from accounts.panel.access import Open, open_to
from accounts.panel.forms import SshKeyForm
from accounts.ssh_keys import ssh_key_add, ssh_key_remove, ssh_keys_of
from audit.services import PanelContext


def _user(request: HttpRequest) -> User:
    user = request.user
    assert isinstance(user, User)  # login_required let only a signed-in person through
    return user


@never_cache
@require_http_methods(["GET", "POST"])
@open_to(Open.SIGNED_IN)
@login_required
def ssh_key_list(request: HttpRequest) -> HttpResponse:
    """The person's keys, and the form that adds one (it posts back here)."""
    user = _user(request)
    form = SshKeyForm(request.POST if request.method == "POST" else None)
    if form.is_valid():
        try:
            key = ssh_key_add(
                user=user,
                name=form.cleaned_data["name"],
                public_key=form.cleaned_data["public_key"],
                context=PanelContext.from_request(request),
            )
        except SshKeyRefused as refused:
            form.add_error("public_key", refused.message)
        else:
            messages.success(request, f"The key {key.name} ({key.fingerprint}) is added.")
            return redirect("ssh_keys")
    context = {"keys": ssh_keys_of(user=user), "form": form}
    status = 400 if form.is_bound else 200
    return render(request, "accounts/ssh_keys.html", context, status=status)


@require_POST
@open_to(Open.SIGNED_IN)
@login_required
def ssh_key_delete(request: HttpRequest, ssh_key_id: int) -> HttpResponse:
    try:
        ssh_key_remove(
            user=_user(request), ssh_key_id=ssh_key_id, context=PanelContext.from_request(request)
        )
    except SshKeyNotFound as missing:
        messages.error(request, missing.message)
        return redirect("ssh_keys")
    messages.success(request, "The key is removed; SFTP sessions it opened are ended.")
    return redirect("ssh_keys")
