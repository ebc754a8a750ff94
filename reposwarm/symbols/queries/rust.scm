; Definitions
(function_item
  name: (identifier) @name.definition.function) @definition.function

(function_signature_item
  name: (identifier) @name.definition.function) @definition.function

(struct_item
  name: (type_identifier) @name.definition.struct) @definition.struct

(union_item
  name: (type_identifier) @name.definition.struct) @definition.struct

(enum_item
  name: (type_identifier) @name.definition.enum) @definition.enum

(trait_item
  name: (type_identifier) @name.definition.trait) @definition.trait

(type_item
  name: (type_identifier) @name.definition.type) @definition.type

(const_item
  name: (identifier) @name.definition.constant) @definition.constant

(static_item
  name: (identifier) @name.definition.constant) @definition.constant

(mod_item
  name: (identifier) @name.definition.module) @definition.module

(macro_definition
  name: (identifier) @name.definition.macro) @definition.macro

(field_declaration
  name: (field_identifier) @name.definition.field) @definition.field

; An impl block scopes its functions (they become methods of the type), but defines nothing.
(impl_item
  type: [
    (type_identifier) @name.scope.impl
    (generic_type type: (type_identifier) @name.scope.impl)
    (scoped_type_identifier name: (type_identifier) @name.scope.impl)
  ]) @scope.impl

; References
(call_expression
  function: (identifier) @name.reference.call)

(call_expression
  function: (scoped_identifier
    name: (identifier) @name.reference.call))

(call_expression
  function: (field_expression
    field: (field_identifier) @name.reference.call))

(call_expression
  function: (generic_function
    function: [
      (identifier) @name.reference.call
      (scoped_identifier name: (identifier) @name.reference.call)
      (field_expression field: (field_identifier) @name.reference.call)
    ]))

(macro_invocation
  macro: (identifier) @name.reference.call)

(type_identifier) @name.reference.type

(use_declaration
  argument: (scoped_identifier
    name: (identifier) @name.reference.import))

(use_declaration
  argument: (identifier) @name.reference.import)

(use_list
  (identifier) @name.reference.import)

(use_list
  (scoped_identifier
    name: (identifier) @name.reference.import))

(use_as_clause
  path: (scoped_identifier
    name: (identifier) @name.reference.import))
