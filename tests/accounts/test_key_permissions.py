"""The key rules live in the service: a person grants or re-mints only scopes they hold, and
deletes only their own keys or keys whose scopes they all hold. Whoever calls gets them."""

import pytest

from accounts.errors import KeyDeletionRefused, KeyNotFound, ScopeExceedsPermissions
from accounts.models import ApiKey, Membership, Organization
from accounts.selectors import api_key_list_for_person
from accounts.services import (
    api_key_create,
    api_key_delete,
    api_key_rotate,
    member_add,
)
from audit.actors import Actor
from audit.services import PanelContext

OWNER_SCOPES = ["servers:read", "servers:power", "keys:read", "audit:read"]


@pytest.fixture
def dora(acme: Organization) -> Membership:
    """A member holding only servers:read."""
    return member_add(
        organization=acme, email="dora@acme.test", password=None, member_scopes=["servers:read"]
    )


def mint(membership: Membership, scopes: list[str], name: str = "k") -> ApiKey:
    context = PanelContext(user_email=membership.user.email)
    return api_key_create(
        membership=membership, name=name, scopes=scopes, actor=Actor.person(context)
    ).key


def context_of(membership: Membership) -> PanelContext:
    return PanelContext(user_email=membership.user.email)


def test_it_refuses_to_rotate_a_key_holding_scopes_the_person_lacks(alice, dora):
    key = mint(alice, OWNER_SCOPES)
    with pytest.raises(ScopeExceedsPermissions) as refused:
        api_key_rotate(
            key=key, membership=dora, grace_hours=0, actor=Actor.person(context_of(dora))
        )
    assert refused.value.scopes == ["servers:power", "keys:read", "audit:read"]


def test_a_refused_rotation_leaves_the_key_as_it_was(alice, dora):
    key = mint(alice, OWNER_SCOPES)
    before = ApiKey.objects.filter(pk=key.pk).values().get()
    with pytest.raises(ScopeExceedsPermissions):
        api_key_rotate(
            key=key, membership=dora, grace_hours=0, actor=Actor.person(context_of(dora))
        )
    assert ApiKey.objects.filter(pk=key.pk).values().get() == before
    assert ApiKey.objects.count() == 1


def test_it_rotates_a_key_whose_recognised_scopes_the_person_holds(alice, dora):
    key = mint(alice, ["servers:read", "made:up"])
    new = api_key_rotate(key=key, membership=dora, actor=Actor.person(context_of(dora)))
    assert new.key.scopes == ["servers:read", "made:up"]
    assert new.key.created_by == dora.user


def test_it_lets_a_creator_delete_their_own_key(alice, acme):
    erin = member_add(organization=acme, email="erin@acme.test", password=None)
    key = mint(erin, [])
    api_key_delete(key=key, membership=erin, actor=Actor.person(context_of(erin)))
    assert ApiKey.objects.get(pk=key.pk).revoked_at is not None


def test_it_refuses_to_delete_another_persons_key_with_scopes_the_person_lacks(alice, dora):
    key = mint(alice, OWNER_SCOPES)
    with pytest.raises(KeyDeletionRefused):
        api_key_delete(key=key, membership=dora, actor=Actor.person(context_of(dora)))
    assert ApiKey.objects.get(pk=key.pk).revoked_at is None


def test_it_lets_a_person_holding_every_scope_on_the_key_delete_it(alice, dora):
    key = mint(alice, ["servers:read"])
    api_key_delete(key=key, membership=dora, actor=Actor.person(context_of(dora)))
    assert ApiKey.objects.get(pk=key.pk).revoked_at is not None


def test_it_refuses_to_act_on_another_organizations_key(alice, charlie):
    key = mint(alice, [])
    with pytest.raises(KeyNotFound):
        api_key_rotate(key=key, membership=charlie, actor=Actor.person(context_of(charlie)))


def test_the_key_list_without_keys_read_holds_only_the_persons_own_keys(alice, dora):
    mint(alice, [], name="alices")
    mint(dora, [], name="doras")
    assert [k.name for k in api_key_list_for_person(dora)] == ["doras"]


def test_the_key_list_with_keys_read_holds_every_key(alice, bob):
    mint(alice, [], name="alices")
    mint(bob, [], name="bobs")
    assert sorted(k.name for k in api_key_list_for_person(bob)) == ["alices", "bobs"]
