//! Items: the merchant's catalogue (merchants see only their own; the server filters).

use super::{error_box, listing, my_role};
use crate::api::{get_item, list_items, SaveItem};
use crate::error::ConsoleFnError;
use contract::{format_cents, Item, Permission, Role};
use leptos::prelude::*;
use leptos_router::{components::A, hooks::use_params_map};

#[component]
pub fn ItemList() -> impl IntoView {
    let items = Resource::new(
        || (),
        |_| async { Ok::<_, ConsoleFnError>((list_items().await?, my_role().await?)) },
    );
    view! {
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                let (items, role) = match items.await {
                    Ok(found) => found,
                    Err(error) => return view! { <h1>"Items"</h1> {error_box(error)} }.into_any(),
                };
                view! {
                    <div class="page-head">
                        <h1>"Items"</h1>
                        {role.may(Permission::WriteCatalog).then(|| view! {
                            <A href="/items/new" attr:class="button">"New item"</A>
                        })}
                    </div>
                    {listing(Ok(items), "No items yet.", |items| view! {
                        <table class="grid" tabindex="0" id="item-list">
                            <thead><tr><th>"ID"</th><th>"Name"</th><th>"Price"</th><th>"Merchant"</th></tr></thead>
                            <tbody>
                                {items.into_iter().map(|item| view! {
                                    <tr>
                                        <td>{item.id}</td>
                                        <td><A href=format!("/items/{}", item.id)>{item.name}</A></td>
                                        <td class="num">{format_cents(item.price_cents)}</td>
                                        <td>{item.merchant_id}</td>
                                    </tr>
                                }).collect_view()}
                            </tbody>
                        </table>
                    }.into_any())}
                }.into_any()
            })}
        </Suspense>
    }
}

#[component]
pub fn ItemCreate() -> impl IntoView {
    let role = Resource::new(|| (), |_| my_role());
    view! {
        <h1>"New item"</h1>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match role.await {
                    // A merchant's item is its own; an admin says whose it is.
                    Ok(role) => view! { <ItemForm item=None ask_merchant={role == Role::Admin}/> }.into_any(),
                    Err(error) => error_box(error),
                }
            })}
        </Suspense>
    }
}

#[component]
pub fn ItemEdit() -> impl IntoView {
    let params = use_params_map();
    let item = Resource::new(
        move || {
            params
                .read()
                .get("id")
                .and_then(|id| id.parse::<i64>().ok())
        },
        |id| async move {
            let id = id.ok_or_else(ConsoleFnError::not_found)?;
            Ok::<_, ConsoleFnError>((get_item(id).await?, my_role().await?))
        },
    );
    view! {
        <h1>"Item"</h1>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match item.await {
                    Ok((item, role)) if role.may(Permission::WriteCatalog) => {
                        view! { <ItemForm item=Some(item) ask_merchant=false/> }.into_any()
                    }
                    // Roles that may not edit the catalogue read it.
                    Ok((item, _)) => view! {
                        <dl class="facts" id="item-facts">
                            <dt>"Name"</dt><dd>{item.name}</dd>
                            <dt>"Description"</dt><dd>{item.description}</dd>
                            <dt>"Price"</dt><dd>{format_cents(item.price_cents)}</dd>
                            <dt>"Merchant"</dt><dd>{item.merchant_id}</dd>
                        </dl>
                    }.into_any(),
                    Err(error) => error_box(error),
                }
            })}
        </Suspense>
    }
}

/// One form for create and edit; it posts even before hydration. `ask_merchant`: a new
/// item's merchant is asked for (an admin's form; an edit keeps the item's merchant).
#[component]
fn ItemForm(item: Option<Item>, ask_merchant: bool) -> impl IntoView {
    let save = ServerAction::<SaveItem>::new();
    let id = item.as_ref().map(|item| item.id.to_string());
    let name = item
        .as_ref()
        .map(|item| item.name.clone())
        .unwrap_or_default();
    let description = item
        .as_ref()
        .map(|item| item.description.clone())
        .unwrap_or_default();
    let price = item
        .as_ref()
        .map(|item| format_cents(item.price_cents))
        .unwrap_or_default();
    view! {
        <ActionForm action=save attr:class="card" attr:id="item-form">
            {id.map(|id| view! { <input type="hidden" name="id" value=id/> })}
            <label>"Name" <input type="text" name="name" value=name required maxlength="200"/></label>
            <label>"Description" <textarea name="description" rows="3">{description}</textarea></label>
            <label>"Price (yuan)" <input type="text" name="price" value=price required inputmode="decimal" placeholder="12.50"/></label>
            {ask_merchant.then(|| view! {
                <label>"Merchant (ID)" <input type="number" name="merchant_id" min="1" required/></label>
            })}
            <button type="submit" disabled=move || save.pending().get()>"Save"</button>
        </ActionForm>
        {move || save.value().get().map(|saved| match saved {
            Ok(_) => view! { <p class="saved" id="saved" role="status">"Saved."</p> }.into_any(),
            Err(error) => error_box(error),
        })}
    }
}
