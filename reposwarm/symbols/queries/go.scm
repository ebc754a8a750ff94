; Definitions
(function_declaration
  name: (identifier) @name.definition.function) @definition.function

(method_declaration
  receiver: (parameter_list
    (parameter_declaration
      type: [
        (type_identifier) @receiver
        (pointer_type (type_identifier) @receiver)
        (generic_type type: (type_identifier) @receiver)
        (pointer_type (generic_type type: (type_identifier) @receiver))
      ]))
  name: (field_identifier) @name.definition.method) @definition.method

(type_spec
  name: (type_identifier) @name.definition.struct
  type: (struct_type)) @definition.struct

(type_spec
  name: (type_identifier) @name.definition.interface
  type: (interface_type)) @definition.interface

(type_spec
  name: (type_identifier) @name.definition.type) @definition.type

(type_alias
  name: (type_identifier) @name.definition.type) @definition.type

(method_elem
  name: (field_identifier) @name.definition.method) @definition.method

(field_declaration
  name: (field_identifier) @name.definition.field) @definition.field

(source_file
  (const_declaration
    (const_spec
      name: (identifier) @name.definition.constant) @definition.constant))

(source_file
  (var_declaration
    (var_spec
      name: (identifier) @name.definition.variable) @definition.variable))

; References
(call_expression
  function: (identifier) @name.reference.call)

(call_expression
  function: (selector_expression
    field: (field_identifier) @name.reference.call))

(type_identifier) @name.reference.type
